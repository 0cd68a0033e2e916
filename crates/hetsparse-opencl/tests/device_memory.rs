//! Backends on one device share its memory: reservations of one leave less to the others,
//! whatever their own budgets and contexts. Its own test binary, so that holding most of the
//! device's memory here cannot starve other tests.

mod common;

use std::sync::Arc;

use hetsparse_core::generate;
use hetsparse_core::{Backend, Device, Error};

#[test]
fn backends_on_one_device_reserve_from_its_memory_together() {
    let Some(a) = common::backend("opencl device memory") else {
        return;
    };
    let b = a.with_own_context().expect("a second context");
    let c = a.clone().with_memory_budget(1 << 40);
    let (pa, pb, pc) = (
        a.memory_pool().expect("pool"),
        b.memory_pool().expect("pool"),
        c.memory_pool().expect("pool"),
    );
    let device = Arc::clone(pa.parent().expect("the device's pool"));
    for p in [&pb, &pc] {
        assert!(Arc::ptr_eq(p.parent().expect("the device's pool"), &device));
        assert!(
            !Arc::ptr_eq(p, &pa),
            "each backend keeps a budget of its own"
        );
    }
    assert_eq!(device.limit(), a.device().global_memory_bytes);

    let m = generate::banded::<f64>(2000, 5, 3);
    // `a` holds all but 1 KiB of the device: `b` and `c` each have a budget far above the
    // matrix, and the device refuses it.
    let held = pa
        .reserve(device.available() - 1024, "most of the device")
        .expect("the device's memory is free");
    for (name, backend) in [("own context", &b), ("own budget", &c)] {
        match backend.upload(&m) {
            Err(Error::OutOfMemory {
                needed_bytes,
                available_bytes,
                ..
            }) => {
                assert!(needed_bytes > 1024, "{name}: {needed_bytes}");
                assert!(available_bytes <= 1024, "{name}: {available_bytes}");
            }
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: the upload overcommitted the device"),
        }
    }
    assert_eq!(pb.reserved(), 0, "a refused upload holds nothing");
    drop(held);
    let rb = b.upload(&m).expect("the device's memory is free again");
    let rc = c.upload(&m).expect("the device's memory is free again");
    assert_eq!(b.download(&rb).unwrap().values(), m.values());
    assert!(device.reserved() >= pb.reserved() + pc.reserved());
    drop((rb, rc));
    assert_eq!((pb.reserved(), pc.reserved()), (0, 0));
}
