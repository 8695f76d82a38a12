use super::*;

/// A disk holding `path` (in the root) with `durable` bytes, file and root synced.
fn disk_with(path: &str, durable: &[u8], seed: u64, keep: u32) -> (SimDisk, Ino) {
    let mut d = SimDisk::new(seed, keep);
    let f = d.create_path(path).unwrap();
    d.write(f, 0, durable).unwrap();
    d.sync(f).unwrap();
    d.sync(ROOT).unwrap();
    (d, f)
}

fn read_path(d: &mut SimDisk, path: &str) -> Vec<u8> {
    let f = d.resolve(path).unwrap();
    d.read(f, 0, 1 << 20).unwrap()
}

#[test]
fn a_crash_keeps_what_was_synced_and_loses_unsynced_sectors_by_seed() {
    let synced = vec![1u8; 3 * SECTOR];
    // keep 0: every pending sector is lost; keep 256: every one is kept.
    for (keep, want_tail) in [(0u32, None), (256, Some(2u8))] {
        let (mut d, f) = disk_with("a.log", &synced, 7, keep);
        d.write(f, 3 * SECTOR as u64, &[2u8; 2 * SECTOR]).unwrap();
        assert_eq!(d.len(f).unwrap(), 5 * SECTOR as u64);
        d.crash();
        let got = read_path(&mut d, "a.log");
        assert_eq!(&got[..3 * SECTOR], &synced[..]);
        match want_tail {
            None => assert_eq!(got.len(), 3 * SECTOR),
            Some(b) => assert_eq!(&got[3 * SECTOR..], &[b; 2 * SECTOR][..]),
        }
    }
}

#[test]
fn crashes_tear_writes_at_sector_boundaries_and_repeat_for_a_seed() {
    let outcome = |seed: u64| {
        let (mut d, f) = disk_with("a.log", &[], seed, 128);
        d.write(f, 0, &[9u8; 16 * SECTOR]).unwrap();
        d.crash();
        read_path(&mut d, "a.log")
    };
    let mut torn = 0;
    for seed in 0..20 {
        let got = outcome(seed);
        assert_eq!(got, outcome(seed), "seed {seed} must repeat");
        // Each sector is whole or absent (zeros up to the file's new end).
        for chunk in got.chunks(SECTOR) {
            assert!(chunk.iter().all(|b| *b == 9) || chunk.iter().all(|b| *b == 0));
        }
        let kept = got.chunks(SECTOR).filter(|c| c[0] == 9).count();
        if kept > 0 && kept < 16 {
            torn += 1;
        }
    }
    assert!(
        torn > 10,
        "half of the sectors kept: most crashes tear ({torn} of 20)"
    );
}

#[test]
fn a_failed_sync_never_turns_into_a_later_success() {
    let (mut d, f) = disk_with("a.log", b"durable", 1, 256);
    d.inject(Fault::SyncEio {
        prefix: "a.".into(),
        once: true,
    });
    d.write(f, 7, b"+lost").unwrap();
    assert!(matches!(d.sync(f), Err(SimError::Eio(_))));
    // The page cache still shows the write, and a retried sync "succeeds"...
    assert_eq!(d.read(f, 0, 64).unwrap(), b"durable+lost");
    assert_eq!(d.sync(f), Ok(()));
    // ...but a crash shows it was never written, even with every pending sector kept.
    d.crash();
    assert_eq!(read_path(&mut d, "a.log"), b"durable");
    assert_eq!(d.counts.sync_eio, 1);
}

#[test]
fn directory_entries_need_a_directory_sync() {
    let (mut d, _) = disk_with("old", b"old contents", 3, 256);
    let replace = |d: &mut SimDisk| {
        let f = d.create_path("new.tmp").unwrap();
        d.write(f, 0, b"new contents").unwrap();
        d.sync(f).unwrap();
        d.rename_path("new.tmp", "old").unwrap();
    };
    replace(&mut d);
    assert_eq!(read_path(&mut d, "old"), b"new contents");
    d.crash();
    // Without the directory sync the rename is gone: the old file is back.
    assert_eq!(d.list("").unwrap(), vec!["old".to_string()]);
    assert_eq!(read_path(&mut d, "old"), b"old contents");
    assert_eq!(
        d.counts.entries_reverted, 1,
        "`old` names its old inode again"
    );
    replace(&mut d);
    d.sync(ROOT).unwrap();
    d.crash();
    assert_eq!(read_path(&mut d, "old"), b"new contents");
}

#[test]
fn a_synced_file_in_an_unsynced_directory_is_lost_with_its_name() {
    let mut d = SimDisk::new(11, 256);
    let dir = d.mkdir_path("data").unwrap();
    d.sync(ROOT).unwrap();
    let part = d.mkdir(dir, "t-0").unwrap();
    let seg = d.create(part, "0.log").unwrap();
    d.write(seg, 0, b"acknowledged").unwrap();
    d.sync(seg).unwrap();
    d.sync(part).unwrap();
    // `data` was not synced after t-0 was made in it: the partition is gone.
    let mut lost = d.clone();
    lost.crash();
    assert_eq!(lost.list("data").unwrap(), Vec::<String>::new());
    assert!(matches!(
        lost.resolve("data/t-0/0.log"),
        Err(SimError::NotFound(_))
    ));
    d.sync(dir).unwrap();
    d.crash();
    assert_eq!(read_path(&mut d, "data/t-0/0.log"), b"acknowledged");
}

#[test]
fn a_renamed_directory_keeps_its_files_and_unlinked_files_stay_readable() {
    let mut d = SimDisk::new(5, 256);
    let p = d.mkdir_path("t-0").unwrap();
    let f = d.create(p, "0.log").unwrap();
    d.write(f, 0, b"records").unwrap();
    d.sync(f).unwrap();
    d.sync(p).unwrap();
    d.sync(ROOT).unwrap();
    d.rename_path("t-0", "t-0.deleted").unwrap();
    assert_eq!(d.path_of(f), "t-0.deleted/0.log");
    // An open handle reads a file after its name is gone.
    d.unlink_path("t-0.deleted/0.log").unwrap();
    assert_eq!(d.read(f, 0, 64).unwrap(), b"records");
    assert!(matches!(d.rmdir(ROOT, "nope"), Err(SimError::NotFound(_))));
    // Nothing synced since: the crash brings back t-0 with its file.
    d.crash();
    assert_eq!(d.list("").unwrap(), vec!["t-0".to_string()]);
    assert_eq!(read_path(&mut d, "t-0/0.log"), b"records");
    assert_eq!(d.path_of(f), "t-0/0.log");
    // rmdir refuses a directory with entries, rename refuses to replace one.
    assert!(matches!(d.rmdir(ROOT, "t-0"), Err(SimError::NotEmpty(_))));
    d.mkdir_path("u").unwrap();
    d.create_path("u/x").unwrap();
    assert!(matches!(
        d.rename_path("t-0", "u"),
        Err(SimError::NotEmpty(_))
    ));
    assert!(matches!(
        d.rename_path("t-0", "t-0/below"),
        Err(SimError::NotFound(_))
    ));
}

#[test]
fn write_errors_full_disks_and_corrupt_sectors() {
    let (mut d, f) = disk_with("a.log", &[0u8; 2 * SECTOR], 5, 128);
    d.inject(Fault::WriteEio {
        prefix: "a.log".into(),
        once: true,
    });
    assert!(matches!(d.write(f, 0, b"x"), Err(SimError::Eio(_))));
    d.write(f, 0, b"x").unwrap(); // once: spent
    d.inject(Fault::NoSpace {
        capacity: 2 * SECTOR as u64 + 10,
    });
    d.write(f, 2 * SECTOR as u64, &[1; 10]).unwrap();
    let e = d.write(f, 2 * SECTOR as u64 + 10, &[1; 1]).unwrap_err();
    assert_eq!((e.errno(), e.to_string().contains("a.log")), (28, true));
    // Overwriting inside the file needs no space.
    d.write(f, 1, b"y").unwrap();
    d.clear_faults();
    d.inject(Fault::CorruptSector {
        path: "a.log".into(),
        sector: 1,
    });
    let got = d.read(f, 0, 2 * SECTOR).unwrap();
    assert_eq!(&got[..2], b"xy");
    assert!(got[SECTOR..].iter().all(|b| *b == 0xA5), "sector 1 flipped");
    assert_eq!(
        (
            d.counts.write_eio,
            d.counts.no_space,
            d.counts.corrupt_reads
        ),
        (1, 1, 1)
    );
}

#[test]
fn truncations_are_kept_or_not_by_the_crash() {
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..16 {
        let (mut d, f) = disk_with("a.log", &[4u8; 4 * SECTOR], seed, 128);
        d.set_len(f, SECTOR as u64).unwrap();
        d.crash();
        lengths.insert(d.len(d.resolve("a.log").unwrap()).unwrap());
    }
    assert_eq!(
        lengths.into_iter().collect::<Vec<_>>(),
        vec![SECTOR as u64, 4 * SECTOR as u64]
    );
}

#[test]
fn a_sync_makes_the_durable_bytes_what_reads_see() {
    // Writes, cuts and regrowth in any order: after a sync a crash that keeps nothing
    // pending must read exactly what was read before it.
    for seed in 0..64u64 {
        let mut rng = SplitMix64(seed);
        let (mut d, f) = disk_with("f", &[], seed, 0);
        for step in 0..40 {
            let r = rng.next();
            let at = (r >> 8) % (6 * SECTOR as u64);
            match r % 4 {
                0 | 1 => {
                    let len = 1 + (r >> 20) as usize % (2 * SECTOR);
                    d.write(f, at, &vec![step as u8 + 1; len]).unwrap();
                }
                2 => d.set_len(f, at).unwrap(),
                _ => d.sync(f).unwrap(),
            }
        }
        d.sync(f).unwrap();
        let before = d.read(f, 0, 1 << 20).unwrap();
        d.crash();
        assert_eq!(read_path(&mut d, "f"), before, "seed {seed}");
    }
}

#[test]
fn the_power_goes_off_between_a_write_and_its_sync() {
    let (mut d, f) = disk_with("a.log", b"synced;", 9, 0);
    d.power_off_after(1);
    d.write(f, 7, b"written").unwrap();
    let e = d.sync(f).unwrap_err();
    assert_eq!((e.errno(), d.is_off()), (5, true), "{e}");
    assert!(
        d.create_path("b").is_err(),
        "nothing changes while the power is off"
    );
    assert_eq!(d.counts.refused_power_off, 2);
    d.crash();
    assert!(!d.is_off());
    assert_eq!(read_path(&mut d, "a.log"), b"synced;");
    d.create_path("b").unwrap();
}

#[test]
fn delays_name_their_operation_and_path_and_a_once_delay_is_spent() {
    let mut d = SimDisk::new(3, 128);
    let dir = d.mkdir_path("t-0").unwrap();
    let f = d.create_path("t-0/leader-epoch-checkpoint").unwrap();
    let other = d.create_path("t-0/0.log").unwrap();
    d.sync(dir).unwrap();
    d.sync(ROOT).unwrap();
    d.inject(Fault::Delay {
        prefix: "t-0/leader-epoch".into(),
        write: false,
        ms: 250,
        once: true,
    });
    d.inject(Fault::Delay {
        prefix: "t-0/0.log".into(),
        write: true,
        ms: 40,
        once: false,
    });
    // A write of the first file, a sync of the second, a directory: none delayed.
    assert_eq!(d.take_delay(f, true), None);
    assert_eq!(d.take_delay(other, false), None);
    assert_eq!(d.take_delay(dir, false), None);
    assert_eq!(d.take_delay(f, false), Some(250));
    assert_eq!(d.take_delay(f, false), None, "once: spent");
    for _ in 0..3 {
        assert_eq!(d.take_delay(other, true), Some(40), "always");
    }
    assert_eq!((d.counts.delays, d.counts.delayed_ms), (4, 370));
    // A delay changes nothing the model keeps: the sync after it makes the bytes durable.
    d.write(f, 0, b"epoch").unwrap();
    d.sync(f).unwrap();
    d.crash();
    assert_eq!(
        &read_path(&mut d, "t-0/leader-epoch-checkpoint")[..5],
        b"epoch"
    );
    d.clear_faults();
    assert_eq!(d.take_delay(other, true), None);
}
