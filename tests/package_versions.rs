//! `quarry version` end to end: the binary in a temporary git checkout with a `version.json`,
//! for every release type, checked against TheRock's test regexes (Python's `re`) and ordered
//! by the real tools: `packaging.version.Version` (pip's vendored copy), `dpkg
//! --compare-versions` and rpm's own `rpm.vercmp`.

use std::path::Path;
use std::process::{Command, Output};

use quarry_tests::{quarry_bin, venv};
use serde_json::Value;

const DATE: &str = "20261124";
const BASE_DATE: &str = "20260811";

struct Checkout {
    dir: tempfile::TempDir,
    sha: String,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Quarry", "-c", "user.email=quarry@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .expect("git is installed");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A git checkout with one commit holding `version.json` (a release branch's: base-date set).
fn checkout(version_json: &str) -> Checkout {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("version.json"), version_json).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    git(dir.path(), &["add", "version.json"]);
    git(dir.path(), &["commit", "-q", "-m", "version"]);
    let sha = git(dir.path(), &["rev-parse", "HEAD"]);
    Checkout { dir, sha }
}

fn release_branch() -> Checkout {
    checkout(&format!(
        "{{\n  \"rocm-version\": \"10.1.0\",\n  \"release-metadata\": {{\n    \"base-date\": \"{BASE_DATE}\"\n  }}\n}}\n"
    ))
}

fn quarry(cwd: &Path, args: &[&str]) -> Output {
    Command::new(quarry_bin())
        .current_dir(cwd)
        .arg("version")
        .args(args)
        .env_remove("GITHUB_SHA")
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove("GITHUB_OUTPUT")
        .output()
        .expect("run quarry")
}

fn json(cwd: &Path, args: &[&str]) -> Value {
    let out = quarry(cwd, &[args, &["--json"]].concat());
    assert!(out.status.success(), "quarry version {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// `(release type, extra flags)` for every type, at a date after the base date.
const TYPES: &[(&str, &[&str])] = &[
    ("ci", &[]),
    ("dev", &[]),
    ("dev-bkc", &[]),
    ("nightly", &[]),
    ("nightly-bkc", &[]),
    ("prerelease", &["--prerelease-version", "2"]),
    ("release", &[]),
];

/// The wheel, deb and rpm versions of each release type, run from a subdirectory of the
/// checkout (version.json is found at the work tree's root).
fn versions(c: &Checkout) -> Vec<(&'static str, [String; 3])> {
    TYPES
        .iter()
        .map(|(t, extra)| {
            let v = json(&c.dir.path().join("sub"), &[&["--release-type", t, "--date", DATE], *extra].concat());
            assert_eq!(v["release_type"], *t);
            let s = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("{t}: {k} in {v}")).to_owned();
            (*t, [s("rocm_package_version"), s("rocm_deb_package_version"), s("rocm_rpm_package_version")])
        })
        .collect()
}

fn python(script: &str, arg: &Value) -> Value {
    let out =
        Command::new(venv().join("bin/python")).args(["-c", script, &arg.to_string()]).output().expect("run python");
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("python prints JSON")
}

#[test]
fn every_release_type_as_therock_computes_it() {
    let c = release_branch();
    let sha = &c.sha;
    let short = &sha[..8];
    let got = versions(&c);
    let expected: Vec<(&str, [String; 3])> = vec![
        ("ci", [format!("10.1.0.dev0+{sha}"), format!("10.1.0~dev{DATE}"), format!("10.1.0~{DATE}g{short}")]),
        ("dev", [format!("10.1.0.dev0+{sha}"), format!("10.1.0~dev{DATE}"), format!("10.1.0~{DATE}g{short}")]),
        ("dev-bkc", [format!("10.1.0.dev0+{sha}"), format!("10.1.0~dev{DATE}"), format!("10.1.0~{DATE}g{short}")]),
        ("nightly", [format!("10.1.0a{DATE}"), format!("10.1.0~{DATE}"), format!("10.1.0~{DATE}")]),
        (
            "nightly-bkc",
            [
                format!("10.1.0a{BASE_DATE}+bkc.{DATE}"),
                format!("10.1.0~{BASE_DATE}.bkc.{DATE}"),
                format!("10.1.0~{BASE_DATE}.bkc.{DATE}"),
            ],
        ),
        ("prerelease", ["10.1.0rc2".into(), "10.1.0~pre2".into(), "10.1.0~rc2".into()]),
        ("release", ["10.1.0".into(), "10.1.0".into(), "10.1.0".into()]),
    ];
    assert_eq!(got, expected);

    // TheRock's own regexes (compute_rocm_package_version_test.py, assertRegex = re.search).
    let regexes: &[(&str, usize, &str)] = &[
        ("ci", 0, r"^[0-9]+[0-9\.]*\.dev0\+[0-9a-z]+$"),
        ("dev", 0, r"^[0-9]+[0-9\.]*\.dev0\+[0-9a-z]+$"),
        ("nightly", 0, r"^[0-9]+[0-9\.]*a[0-9]{8}$"),
        ("nightly-bkc", 0, r"^10\.1\.0a20260811\+bkc\.[0-9]{8}$"),
        ("prerelease", 0, r"^[0-9]+[0-9\.]*rc.*$"),
        ("ci", 1, r"^[0-9]+[0-9\.]*~dev[0-9]{8}$"),
        ("dev", 1, r"^[0-9]+[0-9\.]*~dev[0-9]{8}$"),
        ("dev-bkc", 1, r"^10\.1\.0~dev[0-9]{8}$"),
        ("nightly", 1, r"^[0-9]+[0-9\.]*~[0-9]{8}$"),
        ("nightly-bkc", 1, r"^10\.1\.0~20260811\.bkc\.[0-9]{8}$"),
        ("prerelease", 1, r"^[0-9]+[0-9\.]*~pre.*$"),
        ("ci", 2, r"^[0-9]+[0-9\.]*~[0-9]{8}g[0-9a-z]{8}$"),
        ("dev", 2, r"^[0-9]+[0-9\.]*~[0-9]{8}g[0-9a-z]{8}$"),
        ("dev-bkc", 2, r"^10\.1\.0~[0-9]{8}g[0-9a-z]{8}$"),
        ("nightly", 2, r"^[0-9]+[0-9\.]*~[0-9]{8}$"),
        ("nightly-bkc", 2, r"^10\.1\.0~20260811\.bkc\.[0-9]{8}$"),
        ("prerelease", 2, r"^[0-9]+[0-9\.]*~rc.*$"),
    ];
    let pairs: Vec<Value> = regexes
        .iter()
        .map(|(t, i, re)| {
            let v = &got.iter().find(|(name, _)| name == t).unwrap().1[*i];
            serde_json::json!([re, v])
        })
        .collect();
    let misses = python(
        "import json, re, sys\nprint(json.dumps([p for p in json.loads(sys.argv[1]) if not re.search(p[0], p[1])]))",
        &Value::from(pairs),
    );
    assert_eq!(misses, serde_json::json!([]), "versions TheRock's regexes refuse");
}

/// pip's order of every pair: -1, 0, 1 by `pip._vendor.packaging.version.Version`, and
/// whether each version prints back as itself (canonical).
fn pip_orders(versions: &[&str]) -> (Vec<Vec<i64>>, Vec<bool>) {
    let script = "import json, sys\nfrom pip._vendor.packaging.version import Version\n\
                  vs = json.loads(sys.argv[1])\n\
                  c = lambda a, b: (Version(a) > Version(b)) - (Version(a) < Version(b))\n\
                  print(json.dumps([[[c(a, b) for b in vs] for a in vs], [str(Version(v)) == v for v in vs]]))";
    let out = python(script, &serde_json::json!(versions));
    serde_json::from_value(out).unwrap()
}

fn dpkg_cmp(a: &str, b: &str) -> i64 {
    let dpkg = |op: &str| {
        Command::new("dpkg")
            .args(["--compare-versions", a, op, b])
            .status()
            .expect("dpkg is installed (Debian, Ubuntu)")
            .success()
    };
    if dpkg("lt") {
        -1
    } else if dpkg("eq") {
        0
    } else {
        1
    }
}

/// rpm's `rpm.vercmp` of every pair, in one `rpm --eval`.
fn rpm_orders(versions: &[&str]) -> Vec<Vec<i64>> {
    let list = versions.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(",");
    let lua = format!(
        "%{{lua: local v = {{{list}}}; for _, a in ipairs(v) do for _, b in ipairs(v) do \
         print(rpm.vercmp(a, b) .. \"\\n\") end end}}"
    );
    let out = Command::new("rpm").args(["--eval", &lua]).output().expect("rpm is installed (apt-get install rpm)");
    assert!(out.status.success(), "rpm --eval: {}", String::from_utf8_lossy(&out.stderr));
    let flat: Vec<i64> =
        String::from_utf8(out.stdout).unwrap().split_whitespace().map(|n| n.parse::<i64>().unwrap().signum()).collect();
    assert_eq!(flat.len(), versions.len() * versions.len());
    flat.chunks(versions.len()).map(<[i64]>::to_vec).collect()
}

/// Every release type's versions compared by the real tools. The table is what the tools say
/// of TheRock's strings; `# THEROCK` rows are where they do not follow release > prerelease >
/// nightly > dev (TheRock's defects, kept: Quarry prints TheRock's versions byte for byte).
#[test]
fn release_types_order_under_pip_dpkg_and_rpm() {
    let c = release_branch();
    let got = versions(&c);
    let index = |t: &str| got.iter().position(|(name, _)| *name == t).unwrap();
    let column = |i: usize| got.iter().map(|(_, v)| v[i].as_str()).collect::<Vec<_>>();

    // (tool, a, expected order of a vs b, b, TheRock defect?)
    let expected: &[(&str, &str, i64, &str, bool)] = &[
        ("pip", "release", 1, "prerelease", false),
        ("pip", "prerelease", 1, "nightly", false),
        ("pip", "nightly", 1, "nightly-bkc", false),
        ("pip", "nightly-bkc", 1, "dev-bkc", false),
        ("pip", "dev-bkc", 0, "dev", false),
        ("pip", "dev", 0, "ci", false),
        ("dpkg", "release", 1, "prerelease", false),
        ("dpkg", "prerelease", 1, "nightly", false),
        ("dpkg", "prerelease", 1, "dev", false),
        ("dpkg", "release", 1, "dev", false),
        ("dpkg", "nightly", -1, "dev", true),
        ("dpkg", "nightly-bkc", -1, "dev", true),
        ("dpkg", "nightly", 1, "nightly-bkc", false),
        ("dpkg", "dev-bkc", 0, "dev", false),
        ("rpm", "release", 1, "prerelease", false),
        ("rpm", "release", 1, "nightly", false),
        ("rpm", "release", 1, "dev", false),
        ("rpm", "prerelease", -1, "nightly", true),
        ("rpm", "prerelease", -1, "dev", true),
        ("rpm", "nightly", -1, "dev", true),
        ("rpm", "nightly", 1, "nightly-bkc", false),
        ("rpm", "dev-bkc", 0, "dev", false),
    ];

    let (pip, canonical) = pip_orders(&column(0));
    assert!(canonical.iter().all(|c| *c), "wheel versions are canonical PEP 440: {:?}", column(0));
    let rpm = rpm_orders(&column(2));
    let debs = column(1);
    let mut defects = Vec::new();
    for &(tool, a, want, b, defect) in expected {
        let (i, j) = (index(a), index(b));
        let order = match tool {
            "pip" => pip[i][j],
            "dpkg" => dpkg_cmp(debs[i], debs[j]),
            _ => rpm[i][j],
        };
        let pair = |k: usize| {
            got[k].1[match tool {
                "pip" => 0,
                "dpkg" => 1,
                _ => 2,
            }]
            .clone()
        };
        assert_eq!(order, want, "{tool}: {a} {} vs {b} {}", pair(i), pair(j));
        if defect {
            defects.push(format!("{tool}: {a} {} < {b} {}", pair(i), pair(j)));
        }
    }
    assert_eq!(defects.len(), 5, "{defects:#?}");
}

#[test]
fn flags_environment_and_outputs() {
    let c = release_branch();
    let dir = c.dir.path();
    // --version-file and --override-git-sha need no git checkout.
    let outside = tempfile::tempdir().unwrap();
    let file = dir.join("version.json");
    let v = json(
        outside.path(),
        &[
            "--release-type",
            "dev",
            "--version-file",
            file.to_str().unwrap(),
            "--override-git-sha",
            "abcdef1234567890abcdef1234567890abcdef12",
            "--override-base-version",
            "7.99.0",
            "--date",
            "20251203",
            "--version-suffix",
            "28484694006",
        ],
    );
    assert_eq!(v["rocm_package_version"], "7.99.0.dev0+abcdef1234567890abcdef1234567890abcdef12");
    assert_eq!(v["rocm_deb_package_version"], "7.99.0~dev20251203");
    assert_eq!(v["rocm_rpm_package_version"], "7.99.0~20251203gabcdef12");
    assert_eq!(v["deb"]["version"], "7.99.0~dev20251203-28484694006");
    assert_eq!(v["rpm"], serde_json::json!({"version": "7.99.0~20251203gabcdef12", "release": "28484694006"}));

    // GITHUB_SHA beats git; SOURCE_DATE_EPOCH gives the date (UTC); --github-output appends
    // TheRock's three outputs.
    let output_file = dir.join("github_output");
    std::fs::write(&output_file, "earlier=1\n").unwrap();
    let out = Command::new(quarry_bin())
        .current_dir(dir)
        .args(["version", "--release-type", "ci", "--github-output"])
        .env("GITHUB_SHA", "f".repeat(40))
        .env("SOURCE_DATE_EPOCH", "1764806399") // 2025-12-03T23:59:59Z
        .env("GITHUB_OUTPUT", &output_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ff = "f".repeat(40);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "pip  10.1.0.dev0+{ff}\n\
             deb  10.1.0~dev20251203{pad}  Version: 10.1.0~dev20251203\n\
             rpm  10.1.0~20251203gffffffff{pad2}  Version: 10.1.0~20251203gffffffff  Release: 1\n",
            pad = " ".repeat(ff.len() + 12 - 18),
            pad2 = " ".repeat(ff.len() + 12 - 24),
        )
    );
    assert_eq!(
        std::fs::read_to_string(&output_file).unwrap(),
        format!(
            "earlier=1\nrocm_package_version=10.1.0.dev0+{ff}\nrocm_deb_package_version=10.1.0~dev20251203\n\
             rocm_rpm_package_version=10.1.0~20251203gffffffff\n"
        )
    );

    // A custom suffix goes on all three as given; no sha is asked for.
    let v = json(dir, &["--custom-version-suffix", ".custom1", "--override-base-version", "7.99.0"]);
    assert_eq!(
        [&v["rocm_package_version"], &v["rocm_deb_package_version"], &v["rocm_rpm_package_version"]],
        ["7.99.0.custom1", "7.99.0.custom1", "7.99.0.custom1"]
    );
    assert_eq!(v["release_type"], Value::Null);
    assert_eq!(v["git_sha"], Value::Null);
}

#[test]
fn bad_input_exits_2() {
    let c = release_branch();
    let dir = c.dir.path();
    let main_branch = checkout("{\"rocm-version\": \"10.1.0\", \"release-metadata\": {\"base-date\": \"\"}}\n");
    let bad_date = checkout("{\"rocm-version\": \"10.1.0\", \"release-metadata\": {\"base-date\": \"20261301\"}}\n");
    let outside = tempfile::tempdir().unwrap();
    let cases: &[(&Path, &[&str], &str)] = &[
        (dir, &["--release-type", "weekly"], "invalid value 'weekly'"),
        (dir, &[], "--release-type"),
        (dir, &["--release-type", "nightly", "--custom-version-suffix", "x"], "cannot be used with"),
        (dir, &["--release-type", "prerelease"], "prerelease version is required"),
        (dir, &["--release-type", "nightly", "--prerelease-version", "2"], "must be 'prerelease'"),
        (dir, &["--release-type", "nightly", "--date", "20261301"], "not a date in YYYYMMDD format"),
        (main_branch.dir.path(), &["--release-type", "nightly-bkc"], "release-metadata.base-date must be set"),
        (bad_date.dir.path(), &["--release-type", "nightly"], "valid date in YYYYMMDD format"),
        (outside.path(), &["--release-type", "nightly"], "give --version-file"),
        (dir, &["--release-type", "nightly", "--version-file", "missing.json"], "cannot read missing.json"),
    ];
    for (cwd, args, message) in cases {
        let out = quarry(cwd, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// `quarry package deb|rpm --release-type T`: the packages carry the versions `quarry version`
/// computes (version.json found from the working directory, the sha from git, the date from
/// SOURCE_DATE_EPOCH), read back by dpkg-deb and rpm.
#[test]
fn package_takes_a_release_type() {
    let c = release_branch();
    let artifacts = c.dir.path().join("artifacts");
    quarry_tests::native::artifact(
        &artifacts,
        "core-hip_lib_generic",
        "core/clr/stage",
        &[("lib/libamdhip64.so.7", "runtime")],
    );
    let short = &c.sha[..8];
    let cases: &[(&str, &[&str], &str)] = &[
        ("deb", &["--release-type", "nightly"], "10.1.0~20251203"),
        ("deb", &["--release-type", "dev", "--version-suffix", "77"], "10.1.0~dev20251203-77"),
        ("rpm", &["--release-type", "dev"], &format!("10.1.0~20251203g{short}-1")),
        ("rpm", &["--release-type", "prerelease", "--prerelease-version", "3"], "10.1.0~rc3-1"),
    ];
    for (i, (kind, args, expected)) in cases.iter().enumerate() {
        let dest = c.dir.path().join(format!("out{i}"));
        let out = Command::new(quarry_bin())
            .current_dir(c.dir.path().join("sub"))
            .args(["package", kind, "--json", "--pkg-names", "amdrocm-runtime", "--artifacts-dir"])
            .arg(&artifacts)
            .arg("--dest-dir")
            .arg(&dest)
            .args(*args)
            .env("SOURCE_DATE_EPOCH", "1764806399")
            .env_remove("GITHUB_SHA")
            .env_remove("GITHUB_OUTPUT")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        for built in summary["built"].as_array().unwrap() {
            let file = dest.join(built["file"].as_str().unwrap());
            let version = if *kind == "deb" {
                Command::new("dpkg-deb").arg("--field").arg(&file).arg("Version").output().unwrap()
            } else {
                Command::new("rpm").args(["-qp", "--qf", "%{VERSION}-%{RELEASE}"]).arg(&file).output().unwrap()
            };
            assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), *expected, "{args:?} {}", file.display());
        }
    }
    // Bad input: both kinds of version, or a prerelease without its number.
    let bad: &[(&[&str], &str)] = &[
        (&["--release-type", "nightly", "--rocm-version", "7.1.0"], "cannot be used with"),
        (&["--release-type", "prerelease"], "prerelease version is required"),
        (&["--prerelease-version", "2", "--rocm-version", "7.1.0"], "--release-type"),
    ];
    for (args, message) in bad {
        let out = Command::new(quarry_bin())
            .current_dir(c.dir.path())
            .args(["package", "deb", "--artifacts-dir"])
            .arg(&artifacts)
            .args(["--dest-dir", "never"])
            .args(*args)
            .env_remove("GITHUB_SHA")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!c.dir.path().join("never").exists());
    }
}
