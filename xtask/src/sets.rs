//! Named sets of SuiteSparse matrices for `cargo xtask download --set SET`: the papers' own test
//! matrices and the standard GPU SpGEMM set, as `Group/Name` of the SuiteSparse Matrix
//! Collection. Matrices a paper generated itself (tridiagonal and dense ones of a given size)
//! are left out; the generators in hetsparse-core cover those classes.

/// One named set.
pub struct Set {
    /// What `--set` takes.
    pub name: &'static str,
    /// One line for `--list-sets`: where the set comes from.
    pub about: &'static str,
    /// `Group/Name` of every matrix.
    pub matrices: &'static [&'static str],
}

/// The standard set of GPU SpGEMM studies (the matrices of Williams et al., "Optimization of
/// sparse matrix-vector multiplication on emerging multicore platforms", SC 2007, which Bell
/// and Garland, Matam et al. and Neelima et al. use too), less the dense one: FEM, protein,
/// economics, epidemiology, circuit, web and LP matrices.
const SPGEMM: &[&str] = &[
    "Williams/cant",
    "Williams/consph",
    "Boeing/pwtk",
    "DNVS/shipsec1",
    "Williams/mac_econ_fwd500",
    "Hamm/scircuit",
    "Williams/webbase-1M",
    "Williams/cop20k_A",
    "Bova/rma10",
    "Williams/pdb1HYS",
    "Williams/mc2depi",
    "QCD/conf5_4-8x8-05",
    "Mittelmann/rail4284",
];

/// K. Matam, S. R. K. B. Indarapu and K. Kothapalli, "Sparse Matrix-Matrix Multiplication on
/// Modern Architectures", Fig. 3: Williams et al.'s dataset, with its dense matrix.
const MATAM_WILLIAMS: &[&str] = &[
    "Williams/dense2",
    "Williams/pdb1HYS",
    "Williams/consph",
    "Williams/cant",
    "Boeing/pwtk",
    "Bova/rma10",
    "QCD/conf5_4-8x8-05",
    "DNVS/shipsec1",
    "Williams/mac_econ_fwd500",
    "Williams/mc2depi",
    "Williams/cop20k_A",
    "Hamm/scircuit",
    "Williams/webbase-1M",
    "Mittelmann/rail4284",
];

/// Matam et al. (above), Fig. 4, and L. Polok, V. Ila and P. Smrž, "Fast Sparse Matrix
/// Multiplication on GPU", Table 1: one matrix of each class of the SNAP group.
const SNAP: &[&str] = &[
    "SNAP/roadNet-CA",
    "SNAP/web-Google",
    "SNAP/email-Enron",
    "SNAP/amazon0312",
    "SNAP/ca-CondMat",
    "SNAP/p2p-Gnutella31",
    "SNAP/wiki-Vote",
    "SNAP/cit-Patents",
    "SNAP/as-Skitter",
];

/// Y. Xia and G. Agrawal, "Scaling Sparse Matrix Multiplication on CPU-GPU Nodes",
/// Table II: the nine matrices whose square does not fit one GPU.
const XIA: &[&str] = &[
    "LAW/ljournal-2008",
    "SNAP/com-LiveJournal",
    "SNAP/soc-LiveJournal1",
    "VLSI/stokes",
    "LAW/uk-2002",
    "Gleich/wikipedia-20070206",
    "Schenk/nlpkkt200",
    "Gleich/wikipedia-20061104",
    "Gleich/wikipedia-20060925",
];

/// G. Ortega, F. Vázquez, I. García and E. M. Garzón, "FastSpMM: An Efficient Library for
/// Sparse Matrix Matrix Product on GPUs" (The Computer Journal), Table 1, less the
/// generated tridiagonal and dense matrices.
const ORTEGA: &[&str] = &[
    "Williams/cop20k_A",
    "QCD/conf5_4-8x8-05",
    "PARSEC/Si87H76",
    "INPRO/msdoor",
    "Boeing/pwtk",
    "DNVS/shipsec1",
    "Williams/cant",
    "PARSEC/Ga41As41H72",
    "Williams/consph",
    "DNVS/x104",
    "Fluorem/RM07R",
    "Williams/pdb1HYS",
    "Gleich/wbp128",
    "ND/nd3k",
    "Gleich/wbp256",
    "Williams/dense2",
];

/// B. Neelima and P. S. Raghavendra, "Effective Sparse Matrix Representation for the GPU
/// Architectures" (the CSPR format), Table 2: Williams et al.'s matrices, less QCD and dense.
const NEELIMA: &[&str] = &[
    "Williams/pdb1HYS",
    "Williams/consph",
    "Williams/cant",
    "Boeing/pwtk",
    "Bova/rma10",
    "DNVS/shipsec1",
    "Williams/mac_econ_fwd500",
    "Williams/mc2depi",
    "Williams/cop20k_A",
    "Hamm/scircuit",
    "Williams/webbase-1M",
    "Mittelmann/rail4284",
];

/// Every set, in `--list-sets` order.
pub const SETS: &[Set] = &[
    Set {
        name: "spgemm",
        about: "the standard GPU SpGEMM set (Williams et al., SC 2007, less dense2)",
        matrices: SPGEMM,
    },
    Set {
        name: "matam",
        about: "Matam, Indarapu, Kothapalli: Williams et al.'s set and the SNAP set",
        matrices: MATAM_WILLIAMS,
    },
    Set {
        name: "snap",
        about: "one SNAP matrix per class (Matam et al., Fig. 4; Polok, Ila, Smrž, Table 1)",
        matrices: SNAP,
    },
    Set {
        name: "polok",
        about: "Polok, Ila, Smrž, \"Fast Sparse Matrix Multiplication on GPU\"",
        matrices: SNAP,
    },
    Set {
        name: "xia",
        about: "Xia, Agrawal, \"Scaling Sparse Matrix Multiplication on CPU-GPU Nodes\"",
        matrices: XIA,
    },
    Set {
        name: "ortega",
        about: "Ortega, Vázquez, García, Garzón, \"FastSpMM\", The Computer Journal",
        matrices: ORTEGA,
    },
    Set {
        name: "neelima",
        about: "Neelima, Raghavendra, CSPR (Williams et al.'s set less QCD and dense)",
        matrices: NEELIMA,
    },
];

/// The `Group/Name`s of set `name`; Matam's set is two lists.
pub fn members(name: &str) -> Option<Vec<&'static str>> {
    let set = SETS.iter().find(|s| s.name == name)?;
    let mut all: Vec<&'static str> = set.matrices.to_vec();
    if set.name == "matam" {
        all.extend(SNAP.iter().copied());
    }
    Some(all)
}

/// The names of all sets, for error messages.
pub fn names() -> String {
    SETS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_group_slash_name_once() {
        for set in SETS {
            let all = members(set.name).unwrap();
            assert!(!all.is_empty(), "{}", set.name);
            for (i, m) in all.iter().enumerate() {
                let (group, name) = m.split_once('/').unwrap();
                assert!(
                    !group.is_empty() && !name.is_empty() && !name.contains('/'),
                    "{m}"
                );
                assert!(!all[..i].contains(m), "{m} twice in {}", set.name);
            }
        }
        assert!(members("nope").is_none());
        assert_eq!(
            members("matam").unwrap().len(),
            MATAM_WILLIAMS.len() + SNAP.len()
        );
    }
}
