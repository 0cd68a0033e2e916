use super::{check_len, check_shape};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

/// Storage order of a dense matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Row `i` is contiguous: element `(i, j)` at `i * ncols + j`.
    RowMajor,
    /// Column `j` is contiguous: element `(i, j)` at `j * nrows + i`.
    ColMajor,
}

/// A dense matrix, row- or column-major: the operand and result of SpMM.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense<T> {
    nrows: usize,
    ncols: usize,
    layout: Layout,
    data: Vec<T>,
}

impl<T: Scalar> Dense<T> {
    /// Wraps `data` (length `nrows * ncols`) in the given layout.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        layout: Layout,
        data: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape("dense", nrows, ncols)?;
        let len = (nrows as u64)
            .checked_mul(ncols as u64)
            .filter(|&n| n <= usize::MAX as u64)
            .ok_or(FormatError::ShapeOverflow {
                format: "dense",
                nrows: nrows as u64,
                ncols: ncols as u64,
                reason: "rows × columns does not fit in memory addresses",
            })?;
        check_len("dense", "data", len, data.len())?;
        Ok(Dense {
            nrows,
            ncols,
            layout,
            data,
        })
    }

    /// All zeros: a shape past [`MAX_DIMENSION`](super::MAX_DIMENSION) is a
    /// [`FormatError::ShapeOverflow`], values the host cannot hold are [`Error::OutOfMemory`].
    pub fn zeros(nrows: usize, ncols: usize, layout: Layout) -> Result<Self, Error> {
        check_shape("dense", nrows, ncols)?;
        let len = (nrows as u64) * (ncols as u64);
        host::check_buffer::<T>(len, "dense values")?;
        Ok(Dense {
            nrows,
            ncols,
            layout,
            data: host::try_filled(len as usize, T::zero(), "dense values")?,
        })
    }

    /// Element `(i, j)` computed by `f`.
    pub fn from_fn(
        nrows: usize,
        ncols: usize,
        layout: Layout,
        mut f: impl FnMut(usize, usize) -> T,
    ) -> Result<Self, Error> {
        let mut d = Self::zeros(nrows, ncols, layout)?;
        for i in 0..nrows {
            for j in 0..ncols {
                d.set(i, j, f(i, j));
            }
        }
        Ok(d)
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
    /// Storage order.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// The elements in storage order.
    pub fn data(&self) -> &[T] {
        &self.data
    }
    /// The elements in storage order, mutable.
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
    /// The element storage.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }
    /// Position of `(i, j)` in [`Dense::data`].
    #[inline]
    pub fn index_of(&self, i: usize, j: usize) -> usize {
        match self.layout {
            Layout::RowMajor => i * self.ncols + j,
            Layout::ColMajor => j * self.nrows + i,
        }
    }
    /// Element `(i, j)`. Panics when out of bounds (a programming error).
    #[inline]
    pub fn get(&self, i: usize, j: usize) -> T {
        assert!(i < self.nrows && j < self.ncols, "({i}, {j}) out of bounds");
        self.data[self.index_of(i, j)]
    }
    /// Sets element `(i, j)`. Panics when out of bounds.
    #[inline]
    pub fn set(&mut self, i: usize, j: usize, v: T) {
        assert!(i < self.nrows && j < self.ncols, "({i}, {j}) out of bounds");
        let k = self.index_of(i, j);
        self.data[k] = v;
    }
    /// The same matrix in another layout.
    pub fn to_layout(&self, layout: Layout) -> Self {
        if layout == self.layout {
            return self.clone();
        }
        // As many values as this matrix already holds.
        let mut data = Vec::with_capacity(self.data.len());
        match layout {
            Layout::RowMajor => {
                for i in 0..self.nrows {
                    data.extend((0..self.ncols).map(|j| self.get(i, j)));
                }
            }
            Layout::ColMajor => {
                for j in 0..self.ncols {
                    data.extend((0..self.nrows).map(|i| self.get(i, j)));
                }
            }
        }
        Dense {
            nrows: self.nrows,
            ncols: self.ncols,
            layout,
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_agree() {
        let d = Dense::try_new(2, 3, Layout::RowMajor, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let c = d.to_layout(Layout::ColMajor);
        assert_eq!(c.data(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(c.get(1, 2), 6.0);
        assert_eq!(c.to_layout(Layout::RowMajor), d);
        let e = Dense::try_new(2, 2, Layout::RowMajor, vec![1.0f32]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::LengthMismatch {
                array: "data",
                expected: 4,
                found: 1,
                ..
            }
        ));
        let e = Dense::<f32>::try_new(usize::MAX, 2, Layout::RowMajor, vec![]).unwrap_err();
        assert!(matches!(e, FormatError::ShapeOverflow { .. }));
    }
}
