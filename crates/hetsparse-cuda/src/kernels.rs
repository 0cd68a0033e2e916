//! The kernel modules built from `kernels-cuda/*.cu` by `cargo xtask kernels`, embedded so that
//! building the crate needs no CUDA toolkit: each as portable PTX, which the driver compiles
//! for any GPU from sm_75 on when the module is loaded, and as a binary for sm_90 (H100,
//! H200), which such a GPU loads as it is.

/// One kernel module in its two forms.
pub(crate) struct KernelModule {
    /// File stem, the name launches refer to.
    pub name: &'static str,
    /// Portable PTX (ISA 8.0, `compute_75`).
    pub ptx: &'static str,
    /// The same source compiled for sm_90.
    pub sm90: &'static [u8],
}

macro_rules! module {
    ($name:literal) => {
        KernelModule {
            name: $name,
            ptx: include_str!(concat!("../../../kernels-cuda/", $name, ".ptx")),
            sm90: include_bytes!(concat!("../../../kernels-cuda/", $name, ".sm_90.cubin")),
        }
    };
}

pub(crate) const MODULES: &[KernelModule] = &[
    module!("spgemm"),
    module!("spmv"),
    module!("spmm"),
    module!("dia"),
    module!("bsr"),
    module!("semiring"),
];

/// The compiled form a GPU of compute capability `(major, minor)` loads first: the sm_90
/// binary on 9.x (a binary runs on later minors of its major version), else the PTX.
pub(crate) fn binary_for(compute_capability: (i32, i32)) -> bool {
    compute_capability.0 == 9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `cargo xtask kernels` records in `kernels-cuda/SOURCES`: FNV-1a over the name and
    /// contents of every `.cu`/`.cuh` file, in name order.
    fn fingerprint(dir: &std::path::Path) -> u64 {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cu" | "cuh")))
            .collect();
        files.sort();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for file in files {
            let name = file.file_name().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read(&file).unwrap();
            for &byte in name
                .as_bytes()
                .iter()
                .chain([0u8].iter())
                .chain(text.iter())
            {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        hash
    }

    #[test]
    fn embedded_kernels_match_their_sources() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels-cuda");
        let recorded = std::fs::read_to_string(dir.join("SOURCES")).unwrap();
        assert_eq!(
            recorded.trim(),
            format!("{:016x}", fingerprint(&dir)),
            "kernels-cuda/*.cu changed since the embedded PTX and binaries were built: \
             run `cargo xtask kernels`"
        );
        for module in MODULES {
            assert!(module.ptx.contains(".version 8.0"), "{}", module.name);
            // An ELF image, as the driver expects a binary to be.
            assert_eq!(&module.sm90[..4], b"\x7fELF", "{}", module.name);
        }
    }

    #[test]
    fn binaries_are_chosen_for_compute_capability_9_only() {
        assert!(binary_for((9, 0)));
        assert!(!binary_for((8, 0)));
        assert!(!binary_for((10, 0)));
        assert!(!binary_for((7, 5)));
    }
}
