//! Version ordering against the real tools: every pair of a table that includes TheRock's
//! `~dev`, `~pre`, `~rc` and `-runid` forms compares as `dpkg --compare-versions` says.

use std::cmp::Ordering;

use quarry_packaging::DebVersion;

const DEB_VERSIONS: &[&str] = &[
    "0.9",
    "1.0~~",
    "1.0~~a",
    "1.0~",
    "1.0~rc1",
    "1.0",
    "1.0-0",
    "1.0-1",
    "1.0-1~bpo1",
    "1.0a",
    "1.0+b1",
    "1.0.1",
    "1.01",
    "1.1",
    "1.10",
    "7.10.0~dev20251124",
    "7.10.0~dev20251124-1",
    "7.10.0~dev20251125-12345678901",
    "7.10.0~pre1",
    "7.10.0~rc1",
    "7.10.0",
    "7.10.0-1",
    "7.10.0-12345678901",
    "7.10.0-12345678902",
    "7.10.0.1",
    "7.10.0+git1",
    "1:0.1",
    "2:0.0",
    "1.123456789012345678901",
    "1.123456789012345678902",
];

fn dpkg(a: &str, op: &str, b: &str) -> bool {
    std::process::Command::new("dpkg")
        .args(["--compare-versions", a, op, b])
        .status()
        .expect("dpkg is installed (Debian, Ubuntu)")
        .success()
}

#[test]
fn debian_versions_order_like_dpkg() {
    let mut checked = 0;
    for a in DEB_VERSIONS {
        for b in DEB_VERSIONS {
            let ours = a.parse::<DebVersion>().unwrap().cmp(&b.parse::<DebVersion>().unwrap());
            let theirs = if dpkg(a, "lt", b) {
                Ordering::Less
            } else if dpkg(a, "eq", b) {
                Ordering::Equal
            } else {
                Ordering::Greater
            };
            assert_eq!(ours, theirs, "{a} vs {b}");
            checked += 1;
        }
    }
    assert_eq!(checked, DEB_VERSIONS.len() * DEB_VERSIONS.len());
}
