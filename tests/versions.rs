//! Version ordering against the real tools: every pair of a table that includes TheRock's
//! `~dev`, `~pre`, `~rc` and `-runid` forms compares as `dpkg --compare-versions` says, and
//! every pair of an rpm table (with `~` and `^`) as rpm's own `rpm.vercmp` says.

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

const RPM_VERSIONS: &[&str] = &[
    "0.9",
    "1.0~~",
    "1.0~rc1",
    "1.0~rc2",
    "1.0",
    "1.0^",
    "1.0^git1",
    "1.0^git2",
    "1.0^git1~rc1",
    "1.0.0",
    "1.0.1",
    "1.0a",
    "1.01",
    "1.1",
    "1.10",
    "1.0-1",
    "1.0-2",
    "1.0-1.el9",
    "1.0~rc1-1",
    "7.1.0~dev20260820-12345",
    "7.1.0~dev20260821-1",
    "7.1.0~pre1-1",
    "7.1.0-daily",
    "7.1.0-28484694006",
    "1:0.1",
    "2:0.0-1",
    "a",
    "b",
    "1.a",
    "1.123456789012345678901",
    "1.123456789012345678902",
];

/// rpm's own comparison of every pair, from one `rpm --eval` of a Lua chunk (one process, not
/// one per pair). EVR strings are compared as rpm.ver objects (epoch, version, release).
fn rpm_orders() -> Vec<Ordering> {
    let list = RPM_VERSIONS.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(",");
    let lua = format!(
        "%{{lua: local v = {{{list}}}; for _, a in ipairs(v) do for _, b in ipairs(v) do \
         local x, y = rpm.ver(a), rpm.ver(b); print((x < y and -1 or (x == y and 0 or 1)) .. \"\\n\") end end}}"
    );
    let out = std::process::Command::new("rpm")
        .args(["--eval", &lua])
        .output()
        .expect("rpm is installed (apt-get install rpm)");
    assert!(out.status.success(), "rpm --eval failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| match n {
            "-1" => Ordering::Less,
            "0" => Ordering::Equal,
            "1" => Ordering::Greater,
            other => panic!("unexpected rpm output {other:?}"),
        })
        .collect()
}

#[test]
fn rpm_versions_order_like_rpm() {
    let theirs = rpm_orders();
    assert_eq!(theirs.len(), RPM_VERSIONS.len() * RPM_VERSIONS.len());
    let mut i = 0;
    for a in RPM_VERSIONS {
        for b in RPM_VERSIONS {
            assert_eq!(quarry_index::dnf::evr_str_cmp(a, b), theirs[i], "{a} vs {b}");
            i += 1;
        }
    }
}
