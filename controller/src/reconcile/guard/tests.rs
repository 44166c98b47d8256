use super::catch_panic;
use crate::reconcile::Error;
use kube::runtime::controller::Action;

/// Finding 4: a reconcile panic ended the process.
#[tokio::test]
async fn a_panicking_reconcile_is_an_error_not_the_end() {
    let r = catch_panic("GpuPartition/x", async {
        let mut note = format!("a{}", "é".repeat(600));
        note.truncate(1000); // the panic of issue 11: byte 1000 inside a character
        Ok::<Action, Error>(Action::await_change())
    })
    .await;
    match r {
        Err(e @ Error::Panicked { .. }) => {
            let m = e.to_string();
            assert!(m.contains("GpuPartition/x panicked"), "{m}")
        }
        other => panic!("expected Internal, got {other:?}"),
    }
    let ok = catch_panic("y", async { Ok::<_, Error>(Action::await_change()) }).await;
    assert!(ok.is_ok());
}
