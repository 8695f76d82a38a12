use super::*;

#[test]
fn a_load_serves_only_when_loaded_from_the_open_log_and_leading() {
    let mut load = PartitionLoad::new([1; 16], 7);
    let not_coordinator = ErrorCode::of(ResponseError::NotCoordinator);
    assert_eq!(
        load.ready(Some([1; 16]), true),
        ErrorCode::of(ResponseError::CoordinatorLoadInProgress)
    );
    load.state = LoadState::Loaded;
    assert_eq!(load.ready(Some([1; 16]), true), ErrorCode::NONE);
    // Another log (the topic was deleted and created again), no log, or not the leader.
    assert_eq!(load.ready(Some([2; 16]), true), not_coordinator);
    assert_eq!(load.ready(None, true), not_coordinator);
    assert_eq!(load.ready(Some([1; 16]), false), not_coordinator);
    load.state = LoadState::Failed;
    assert_eq!(
        load.ready(Some([1; 16]), true),
        ErrorCode::of(ResponseError::CoordinatorNotAvailable)
    );
}

#[test]
fn pending_writes_apply_in_log_order_up_to_the_high_watermark() {
    let mut w = PendingWrites::default();
    w.push(3, vec!["a", "b"]);
    w.push(5, vec!["c"]);
    w.push(9, vec!["d"]);
    assert_eq!(
        w.changes().copied().collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
    assert!(
        w.take_committed(2).is_empty(),
        "nothing before the first write's end"
    );
    assert_eq!(w.take_committed(5), ["a", "b", "c"]);
    assert_eq!(w.take_committed(5), Vec::<&str>::new(), "taken once");
    assert!(!w.is_empty());
    assert_eq!(w.take_committed(i64::MAX), ["d"]);
    assert!(w.is_empty());
}

#[test]
#[should_panic(expected = "log order")]
fn pending_writes_refuse_an_end_that_goes_back() {
    let mut w = PendingWrites::default();
    w.push(5, vec![1]);
    w.push(5, vec![2]);
}

#[test]
fn due_deadlines_are_taken_earliest_first_and_once() {
    let mut t = TimerIndex::default();
    t.insert(30, "c");
    t.insert(10, "a");
    t.insert(20, "b");
    t.insert(20, "a2");
    t.remove(30, "c");
    assert!(!t.contains(30, "c") && t.contains(20, "b"));
    assert_eq!(t.next_deadline_ms(), Some(10));
    assert_eq!(
        t.take_due(20),
        [
            (10, "a".to_string()),
            (20, "a2".to_string()),
            (20, "b".to_string())
        ]
    );
    assert!(t.take_due(20).is_empty());
    t.insert(i64::MAX, "last");
    assert_eq!(t.len(), 1);
    assert_eq!(t.take_due(i64::MAX), [(i64::MAX, "last".to_string())]);
    assert!(t.is_empty() && t.next_deadline_ms().is_none());
}
