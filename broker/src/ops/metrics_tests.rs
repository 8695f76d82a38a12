use super::*;

/// Snapshots read the shard's executor, so the tests run on one.
fn on_executor<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { f() })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn renders_per_shard_lines() {
    let text = on_executor(|| {
        let c = ShardCounters::default();
        c.count_request(Some(ApiKey::Produce));
        c.count_request(Some(ApiKey::Produce));
        c.add_bytes_in(10);
        let mut s = c.snapshot();
        s.partitions_owned = 3;
        render(&[s, CountersSnapshot::default()])
    });
    assert!(
        text.contains("keel_requests_total{shard=\"0\",api=\"Produce\"} 2"),
        "{text}"
    );
    assert!(text.contains("keel_bytes_in_total{shard=\"0\"} 10"));
    assert!(text.contains("keel_partitions_owned{shard=\"0\"} 3"));
    assert!(text.contains("keel_partitions_owned{shard=\"1\"} 0"));
    assert!(
        text.contains("keel_task_queue_busy_seconds_total{shard=\"0\",queue=\"default\"}"),
        "{text}"
    );
}

#[test]
fn histograms_bucket_merge_and_render_cumulatively() {
    let mut h = Histogram::default();
    h.record(Duration::from_micros(3)); // first bucket
    h.record(Duration::from_micros(100)); // exactly on the 100 us bound
    h.record(Duration::from_millis(3)); // (2.5 ms, 5 ms]
    h.record(Duration::from_secs(60)); // above every bound
    assert_eq!(h.buckets[0], 1);
    assert_eq!(h.buckets[4], 1);
    assert_eq!(h.buckets[9], 1);
    assert_eq!(h.buckets[BUCKETS_S.len()], 1);
    assert_eq!(h.count, 4);
    let text = on_executor(move || {
        let a = ShardCounters::default();
        let b = ShardCounters::default();
        a.record(0, Stage::Flush, Duration::from_millis(3));
        b.record(0, Stage::Flush, Duration::from_millis(30));
        b.record(0, Stage::Total, Duration::from_millis(40));
        render(&[a.snapshot(), b.snapshot()])
    });
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} missing:\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    let stage = "keel_request_stage_seconds_bucket{api=\"Produce\",stage=\"flush\",";
    assert_eq!(line(&format!("{stage}le=\"0.0025\"}}")), "0");
    assert_eq!(line(&format!("{stage}le=\"0.005\"}}")), "1");
    assert_eq!(line(&format!("{stage}le=\"0.05\"}}")), "2");
    assert_eq!(line(&format!("{stage}le=\"+Inf\"}}")), "2");
    assert_eq!(
        line("keel_request_stage_seconds_count{api=\"Produce\",stage=\"flush\"}"),
        "2"
    );
    assert_eq!(
        line("keel_request_latency_seconds_count{api=\"Produce\"}"),
        "1"
    );
    assert!(!text.contains("stage=\"total\""), "{text}");
}

#[test]
fn shard_and_process_cpu_are_the_kernel_accounting() {
    // A shard that spins shows it as its own CPU time (0.1 s of it within 5 s of wall time,
    // however loaded the machine: a wall-clock spin on a busy 2-core machine may get less);
    // a shard that sleeps shows next to none.
    let (busy, idle) = on_executor(|| {
        let before = thread_cpu();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let spun = |b: &CpuSeconds| b.user_s + b.system_s - before.user_s - before.system_s;
        let mut busy = ShardCounters::default().snapshot().cpu;
        while spun(&busy) < 0.1 && start.elapsed() < Duration::from_secs(5) {
            let chunk = std::time::Instant::now();
            while chunk.elapsed() < Duration::from_millis(10) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            busy = ShardCounters::default().snapshot().cpu;
        }
        let slept = thread_cpu();
        std::thread::sleep(Duration::from_millis(200));
        let idle = thread_cpu();
        (
            busy.user_s + busy.system_s - before.user_s - before.system_s,
            idle.user_s + idle.system_s - slept.user_s - slept.system_s,
        )
    });
    assert!(busy >= 0.1, "a spin of up to 5 s counted {busy} s");
    assert!(idle < 0.05, "a 200 ms sleep counted {idle} s");

    let s = CountersSnapshot {
        cpu: CpuSeconds {
            user_s: 1.5,
            system_s: 0.25,
        },
        ..CountersSnapshot::default()
    };
    let text = render(&[s]);
    assert!(text.contains("keel_shard_cpu_seconds_total{shard=\"0\",mode=\"user\"} 1.5"));
    assert!(text.contains("keel_shard_cpu_seconds_total{shard=\"0\",mode=\"system\"} 0.25"));
    let p = render_process_cpu(CpuSeconds {
        user_s: 2.0,
        system_s: 0.5,
    });
    assert!(p.contains("\nprocess_cpu_seconds_total 2.5\n"), "{p}");
    assert!(p.contains("keel_process_cpu_seconds_total{mode=\"system\"} 0.5\n"));
    let now = process_cpu();
    assert!(
        now.user_s >= busy * 0.5,
        "the process counts its threads: {now:?}"
    );
}
