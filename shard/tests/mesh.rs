//! The mesh under a tiny channel: every call is delivered and answered exactly once
//! (a full channel makes senders wait, it never drops), and the counters add up (an
//! observer's call counted on neither side).

use std::cell::Cell;
use std::rc::Rc;

use keel_shard::{launch, Event, RuntimeConfig, ShardBoot};

#[derive(Default)]
struct State {
    served: Cell<u64>,
    done: Event,
}

#[test]
fn a_full_channel_applies_backpressure_and_loses_nothing() {
    const CALLS: u64 = 2000;
    let config = RuntimeConfig {
        smp: 2,
        io_memory_bytes: 65536,
        mesh_channel_capacity: 1,
        pin: false,
        ..RuntimeConfig::default()
    };
    launch(&config, |boot: ShardBoot<State>| async move {
        let state = Rc::new(State::default());
        boot.mesh.serve(boot.receivers, state.clone(), 4);
        if boot.shard_id == 1 {
            state.done.wait().await;
            assert_eq!(state.served.get(), CALLS);
            assert_eq!(boot.mesh.counters().jobs_in, CALLS + 1);
            return;
        }
        let mesh = boot.mesh.clone();
        let tasks: Vec<_> = (0..CALLS)
            .map(|i| {
                let mesh = mesh.clone();
                glommio::spawn_local(async move {
                    let n = mesh
                        .call(1, move |s: Rc<State>| async move {
                            s.served.set(s.served.get() + 1);
                            (i, s.served.get())
                        })
                        .await
                        .expect("call answered");
                    assert_eq!(n.0, i);
                    n.1
                })
            })
            .collect();
        let mut seen = Vec::with_capacity(CALLS as usize);
        for t in tasks {
            seen.push(t.await);
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            (1..=CALLS).collect::<Vec<_>>(),
            "every call ran exactly once"
        );
        assert_eq!(mesh.counters().hops_out, CALLS);
        // An observer's call is answered like any other and counted on neither side (shard 1
        // checks its jobs_in after the last call below).
        let served = mesh
            .call_uncounted(1, |s: Rc<State>| async move { s.served.get() })
            .await
            .unwrap();
        assert_eq!(served, CALLS);
        assert_eq!(mesh.counters().hops_out, CALLS);
        mesh.call(1, |s: Rc<State>| async move { s.done.fire() })
            .await
            .unwrap();
    })
    .unwrap();
}
