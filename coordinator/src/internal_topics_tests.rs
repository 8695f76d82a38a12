use super::*;

#[test]
fn hashcode_matches_java() {
    // Values of "...".hashCode() in Java.
    assert_eq!(java_string_hashcode(""), 0);
    assert_eq!(java_string_hashcode("a"), 97);
    assert_eq!(java_string_hashcode("hello"), 99_162_322);
    assert_eq!(java_string_hashcode("my-group"), -1_906_497_762);
    assert_eq!(java_string_hashcode("polygenelubricants"), i32::MIN);
    // A character outside the BMP counts as two UTF-16 units.
    assert_eq!(java_string_hashcode("\u{1F600}"), 1_772_899);
}

#[test]
fn partition_is_kafkas_abs_modulo() {
    assert_eq!(partition_for("", 50), 0);
    assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
    // Negative hash: Utils.abs (12), not a mask (which would give 36).
    assert_eq!(partition_for("my-group", 50), 12);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    for g in ["a", "b", "group-1", "x".repeat(300).as_str()] {
        assert!((0..7).contains(&partition_for(g, 7)));
    }
}
