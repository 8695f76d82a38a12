use super::*;
use std::collections::HashMap;

fn commit(g: &str, t: &str, i: i32, offset: i64, ts: i64) -> OffsetChange {
    commit_changes(g, vec![(t.into(), i, offset, -1, String::new())], ts).remove(0)
}

fn delete(g: &str, t: &str, i: i32) -> OffsetChange {
    OffsetChange::delete(g, t, i)
}

#[test]
fn pending_writes_apply_in_log_order_up_to_the_high_watermark() {
    let c = GroupCoordinator::default();
    let (id, _) = c.begin_load(0, [1; 16]);
    c.finish_load(0, id, Some(HashMap::new()));
    c.push_pending(0, Offset(1), vec![commit("g", "t", 0, 1, 1)]);
    c.push_pending(0, Offset(2), vec![commit("g", "t", 0, 2, 1)]);
    // The second write's commit completes first: nothing past the watermark is applied.
    c.apply_committed(0, id, Offset(1));
    assert_eq!(c.groups.borrow()["g"].offsets[&("t".into(), 0)].offset, 1);
    assert!(c.has_pending(0, "g"));
    c.apply_committed(0, id, Offset(2));
    assert_eq!(c.groups.borrow()["g"].offsets[&("t".into(), 0)].offset, 2);
    assert!(!c.has_pending(0, "g"));
    // The watermark of another load of the partition (reopened meanwhile) applies nothing.
    c.push_pending(0, Offset(3), vec![commit("g", "t", 0, 3, 1)]);
    c.apply_committed(0, id + 1, Offset(3));
    assert_eq!(c.groups.borrow()["g"].offsets[&("t".into(), 0)].offset, 2);
}

#[test]
fn a_stale_load_is_dropped() {
    let c = GroupCoordinator::default();
    let (first, _) = c.begin_load(4, [1; 16]);
    let (second, _) = c.begin_load(4, [2; 16]);
    let mut old = HashMap::new();
    apply_change(&mut old, 4, commit("old", "t", 0, 1, 1));
    c.finish_load(4, first, Some(old));
    assert!(c.groups.borrow().is_empty());
    assert_eq!(c.loaded_partitions(), Vec::<i32>::new());
    c.finish_load(4, second, Some(HashMap::new()));
    assert_eq!(c.loaded_partitions(), vec![4]);
}

#[test]
fn expiry_takes_whole_old_groups_only() {
    let c = GroupCoordinator::default();
    let (id, _) = c.begin_load(0, [1; 16]);
    let mut loaded = HashMap::new();
    apply_change(&mut loaded, 0, commit("old", "t", 0, 1, 100));
    apply_change(&mut loaded, 0, commit("old", "t", 1, 1, 200));
    apply_change(&mut loaded, 0, commit("mixed", "t", 0, 1, 100));
    apply_change(&mut loaded, 0, commit("mixed", "t", 1, 1, 5_000));
    c.finish_load(0, id, Some(loaded));
    let mut expired = c.expired(0, 1_000, 500);
    expired.sort_by_key(|ch| ch.key().partition);
    assert_eq!(expired, vec![delete("old", "t", 0), delete("old", "t", 1)]);
    // A group with a write in flight is left for the next check.
    c.push_pending(0, Offset(1), vec![commit("old", "t", 0, 2, 900)]);
    assert!(c.expired(0, 1_000, 500).is_empty());
}
