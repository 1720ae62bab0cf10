//! Wheel variants (PEP 825) through the pip indexes, with real clients: `variantlib` (the
//! reference library, from PyPI) validates the published `{name}-{version}-variants.json` and,
//! given fixed GPU properties through a small provider plugin, selects the wheel the page lists;
//! uv with `--preview-features wheel-variants` installs the null variant through the index (it
//! has no AMD provider); plain pip and uv still install the non-variant wheel. A variant wheel
//! that disagrees with its release is refused with the reason and changes no page.

use std::path::Path;
use std::time::Duration;

use quarry_tests::{ROOT, TestServer, assert_success, build_zip, run, snapshot_pages, uv_pip, venv};

const NAME: &str = "rocm-sdk-device";
const DIST: &str = "rocm_sdk_device";
const VERSION: &str = "7.10.0";
const SCHEMA: &str = "https://variants-schema.wheelnext.dev/v0.2.0.json";

/// The `variant.json` of a wheel labelled `label` whose `amd :: gfx_arch` values are `arch`
/// (none: the null variant), in the providers format `variantlib` 0.2.2 reads. The provider is
/// optional: installers without it (uv) skip the AMD variants and take the null one.
pub(crate) fn variant_json(label: &str, arch: &[&str]) -> String {
    let properties =
        if arch.is_empty() { serde_json::json!({}) } else { serde_json::json!({ "amd": { "gfx_arch": arch } }) };
    serde_json::json!({
        "$schema": SCHEMA,
        "default-priorities": { "namespace": ["amd"] },
        "providers": { "amd": {
            "requires": ["quarry-test-amd-provider"],
            "plugin-api": "quarry_test_amd_provider:Plugin",
            "optional": true,
        } },
        "variants": { label: properties },
    })
    .to_string()
}

/// A wheel of rocm-sdk-device whose module says which variant it is (`VARIANT`), with
/// `variant_json` in its `.dist-info` when given.
pub(crate) fn wheel(label: Option<&str>, variant_json: Option<String>) -> (String, Vec<u8>) {
    let dist_info = format!("{DIST}-{VERSION}.dist-info");
    let mut members = vec![
        (format!("{DIST}/__init__.py"), format!("VARIANT = {:?}\n", label.unwrap_or("none"))),
        (format!("{dist_info}/METADATA"), format!("Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n")),
        (
            format!("{dist_info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: quarry-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into(),
        ),
    ];
    if let Some(json) = variant_json {
        members.push((format!("{dist_info}/variant.json"), json));
    }
    let filename = match label {
        Some(l) => format!("{DIST}-{VERSION}-py3-none-any-{l}.whl"),
        None => format!("{DIST}-{VERSION}-py3-none-any.whl"),
    };
    (filename, build_zip(&members, Some(&dist_info)))
}

/// The test provider plugin: every value of `amd :: gfx_arch` it knows, and as supported the
/// ones in `QUARRY_TEST_GFX` (comma-separated), as a real plugin would detect them.
const PLUGIN: &str = r#"
import os
from dataclasses import dataclass, field

@dataclass
class Feature:
    name: str
    values: list = field(default_factory=list)
    multi_value: bool = True

class Plugin:
    @classmethod
    def get_all_configs(cls):
        return [Feature("gfx_arch", ["gfx942", "gfx1100", "gfx90a"])]

    @classmethod
    def get_supported_configs(cls):
        return [Feature("gfx_arch", [v for v in os.environ["QUARRY_TEST_GFX"].split(",") if v])]
"#;

/// Reads the project's PEP 691 page, validates every `-variants.json` it links with
/// `variantlib` (and its sha256), orders the variants for the plugin's properties and prints
/// the labels in order and the wheel the page lists for the best one.
const SELECT: &str = r#"
import hashlib, json, sys, urllib.parse, urllib.request
from variantlib.api import get_variants_by_priority
from variantlib.variants_json import VariantsJson

page_url = sys.argv[1]
request = urllib.request.Request(page_url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
page = json.load(urllib.request.urlopen(request))
files = {f["filename"]: f for f in page["files"]}
linked = [n for n in files if n.endswith("-variants.json")]
assert len(linked) == 1, linked
data = urllib.request.urlopen(urllib.parse.urljoin(page_url, files[linked[0]]["url"])).read()
assert hashlib.sha256(data).hexdigest() == files[linked[0]]["hashes"]["sha256"]
variants = VariantsJson(json.loads(data))
ordered = get_variants_by_priority(variants_json=variants, enable_optional_plugins=True)
labels = [v.label for v in ordered]
by_label = {n[:-4].rsplit("-", 1)[1]: n for n in files if n.endswith(".whl") and n.count("-") == 5}
print(json.dumps({"labels": labels, "wheel": by_label.get(labels[0]) if labels else None, "linked": linked[0]}))
"#;

async fn select(server: &TestServer, dir: &Path, gfx: &str) -> serde_json::Value {
    select_in(server, NAME, dir, gfx).await
}

/// [`select`] over project `name`'s page.
async fn select_in(server: &TestServer, name: &str, dir: &Path, gfx: &str) -> serde_json::Value {
    let venv = venv();
    let mut cmd = tokio::process::Command::new(venv.join("bin/python"));
    cmd.arg(dir.join("pick_variant.py"))
        .arg(format!("{}simple/{name}/", server.root_url()))
        .env("PYTHONPATH", dir)
        .env("QUARRY_TEST_GFX", gfx);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, &format!("variantlib selecting for {gfx:?} (is variantlib==0.2.2 in the venv? scripts/test)"));
    serde_json::from_slice(&out.stdout).expect("pick_variant.py prints JSON")
}

/// Install rocm-sdk-device through the index into a fresh target; which variant's module landed.
async fn installed_variant(server: &TestServer, client: &str, preview: bool) -> String {
    let target = tempfile::tempdir().expect("tempdir");
    let simple = format!("{}simple/", server.root_url());
    let out = match client {
        "pip" => quarry_tests::pip_install(&["--index-url", &simple, NAME], target.path()).await,
        _ => {
            let mut args = vec!["--index-url", simple.as_str(), NAME];
            if preview {
                args.extend(["--preview-features", "wheel-variants"]);
            }
            uv_pip("install", &args, Some(target.path())).await
        }
    };
    assert_success(&out, &format!("{client} install (preview {preview})"));
    std::fs::read_to_string(target.path().join(DIST).join("__init__.py")).expect("the module is installed")
}

#[tokio::test]
async fn variant_wheels_are_indexed_selected_and_installed() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("quarry_test_amd_provider.py"), PLUGIN).expect("plugin");
    std::fs::write(dir.path().join("pick_variant.py"), SELECT).expect("script");

    let mut wheels = vec![wheel(None, None)];
    for (label, arch) in [("gfx942", &["gfx942"][..]), ("gfx1100", &["gfx1100"]), ("null", &[])] {
        wheels.push(wheel(Some(label), Some(variant_json(label, arch))));
    }
    for (filename, body) in &wheels {
        let (status, text) = server.upload_bytes(&format!("{ROOT}{filename}"), body.clone()).await;
        assert_eq!(status, 201, "{filename}: {text}");
    }

    // Every page that lists the wheels links the release's variants.json.
    let variants_json = format!("{DIST}-{VERSION}-variants.json");
    for page in [String::new(), format!("simple/{NAME}/"), format!("simple/{NAME}/index.json")] {
        let (status, text) = server.get_text(&format!("{ROOT}{page}")).await;
        assert_eq!(status, 200);
        assert!(text.contains(&variants_json), "{page} does not link {variants_json}:\n{text}");
    }
    let (status, published) = server.get_text(&format!("{ROOT}{variants_json}")).await;
    assert_eq!(status, 200);
    let published: serde_json::Value = serde_json::from_str(&published).expect("JSON");
    let labels: Vec<&String> = published["variants"].as_object().expect("variants").keys().collect();
    assert_eq!(labels, ["gfx1100", "gfx942", "null"]);

    // `quarry index --check`'s audit finds every link (the variants.json one too) consistent.
    let store = quarry_store::LocalStore::open(server.store_dir()).expect("store");
    let root = quarry_index::RepoRoot::new(ROOT, &Default::default()).expect("root");
    let report = quarry_index::check(&store, &root, &Default::default()).await.expect("check");
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // variantlib validates it and, with the plugin's properties, picks the wheel the page lists.
    let chosen = select(&server, dir.path(), "gfx942").await;
    assert_eq!(chosen["linked"], variants_json.as_str());
    assert_eq!(chosen["labels"], serde_json::json!(["gfx942", "null"]));
    assert_eq!(chosen["wheel"], format!("{DIST}-{VERSION}-py3-none-any-gfx942.whl").as_str());
    let chosen = select(&server, dir.path(), "gfx1100,gfx942").await;
    assert_eq!(chosen["wheel"], format!("{DIST}-{VERSION}-py3-none-any-gfx1100.whl").as_str());
    let chosen = select(&server, dir.path(), "gfx803").await;
    assert_eq!(chosen["labels"], serde_json::json!(["null"]), "an unknown GPU gets the null variant");

    // uv with variants (no AMD provider: the null variant); pip and uv without: the plain wheel.
    assert_eq!(installed_variant(&server, "uv", true).await, "VARIANT = \"null\"\n");
    assert_eq!(installed_variant(&server, "uv", false).await, "VARIANT = \"none\"\n");
    assert_eq!(installed_variant(&server, "pip", false).await, "VARIANT = \"none\"\n");
    server.stop().await;
}

#[tokio::test]
async fn a_variant_wheel_that_disagrees_with_its_release_is_refused() {
    let server = TestServer::start().await;
    let (filename, body) = wheel(Some("gfx942"), Some(variant_json("gfx942", &["gfx942"])));
    assert_eq!(server.upload_bytes(&format!("{ROOT}{filename}"), body).await.0, 201);
    let variants_json = format!("{ROOT}{DIST}-{VERSION}-variants.json");
    let before = snapshot_pages(&server, &[NAME]).await;
    let (_, json_before) = server.get_text(&variants_json).await;

    // The same label meaning other properties, as a build-tagged wheel of the same release.
    let (_, body) = wheel(Some("gfx942"), Some(variant_json("gfx942", &["gfx942", "gfx950"])));
    let other = format!("{DIST}-{VERSION}-1-py3-none-any-gfx942.whl");
    let (status, text) = server.upload_bytes(&format!("{ROOT}{other}"), body).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("disagrees with the release's other variant wheels")
            && text.contains("means [amd :: gfx_arch :: gfx942, amd :: gfx_arch :: gfx950] here"),
        "{text}"
    );
    // A label the filename does not carry, and a variant wheel without variant.json.
    let (_, body) = wheel(Some("gfx90a"), Some(variant_json("gfx942", &["gfx942"])));
    let (status, text) = server.upload_bytes(&format!("{ROOT}{DIST}-{VERSION}-py3-none-any-gfx90a.whl"), body).await;
    assert!(status == 400 && text.contains("filename's label"), "{status} {text}");
    let (_, body) = wheel(Some("gfx90a"), None);
    let (status, text) = server.upload_bytes(&format!("{ROOT}{DIST}-{VERSION}-py3-none-any-gfx90a.whl"), body).await;
    assert!(status == 400 && text.contains("has no .dist-info/variant.json"), "{status} {text}");

    assert_eq!(snapshot_pages(&server, &[NAME]).await, before, "the pages stay as they were");
    assert_eq!(server.get_text(&variants_json).await.1, json_before, "and so does variants.json");
    assert!(!server.store_dir().join(ROOT).join(&other).exists(), "the refused upload is discarded");
    server.stop().await;
}

/// Checks every wheel given as PEP 427 and PEP 825 ask: the zip is sound, RECORD lists every
/// member (RECORD itself without a hash) with its sha256 and size, and nothing else; a variant
/// wheel's `variant.json` is read by `variantlib` as the one variant its filename's label names.
const CHECK_WHEELS: &str = r#"
import base64, csv, hashlib, io, sys, zipfile
from variantlib.variant_dist_info import VariantDistInfo

for path in sys.argv[1:]:
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, path
        names = z.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.TextIOWrapper(z.open(record_name), "utf-8")))
        listed = {row[0]: row for row in rows}
        assert sorted(listed) == sorted(names), (path, sorted(set(listed) ^ set(names)))
        assert listed[record_name][1:] == ["", ""], listed[record_name]
        for name in names:
            if name == record_name:
                continue
            data = z.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert listed[name][1:] == ["sha256=" + digest, str(len(data))], (path, name)
        stem = path.rsplit("/", 1)[-1][:-4]
        if stem.count("-") == 5:
            label = stem.rsplit("-", 1)[1]
            info = VariantDistInfo(z.read(record_name[:-6] + "variant.json"), expected_label=label)
            print(label, [p.to_str() for p in info.variant_desc.properties])
"#;

const VARIANT_VERSION: &str = "7.1.0";
const PLATFORM: &str = "linux_x86_64";

fn variant_file(target: &str) -> String {
    format!("rocm_sdk_device-{VARIANT_VERSION}-py3-none-{PLATFORM}-{target}.whl")
}

/// Installs `requirement` from the server's index with pip or uv (no variants) into a fresh
/// target; the output and the target.
async fn plain_install(
    server: &TestServer,
    client: &str,
    requirement: &str,
) -> (std::process::Output, tempfile::TempDir) {
    let target = tempfile::tempdir().expect("tempdir");
    let simple = format!("{}simple/", server.root_url());
    let args = ["--index-url", simple.as_str(), requirement];
    let out = match client {
        "pip" => quarry_tests::pip_install(&args, target.path()).await,
        _ => uv_pip("install", &args, Some(target.path())).await,
    };
    (out, target)
}

/// `quarry package python --variants` over the rocm-sdk fixtures of `tests/wheels.rs`: the
/// device wheels come out a second time as variants of `rocm-sdk-device` (same bytes on a second
/// run), sound wheels whose `variant.json` `variantlib` reads; uploaded into a run beside the
/// extras-based wheels, the index takes them, publishes `-variants.json`, `variantlib` with a
/// provider that reports gfx942 selects the gfx942 wheel, and pip and uv without variants still
/// install the extras-based device wheel and never a variant one.
#[tokio::test(flavor = "multi_thread")]
async fn package_python_variants_are_indexed_and_selected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let artifacts = tmp.path().join("artifacts");
    crate::wheels::tree(&artifacts).await;
    let dist = tmp.path().join("dist");
    let out = crate::wheels::package(&artifacts, &dist, &["--variants"]).await;
    assert_success(&out, "quarry package python --variants");
    let built = crate::wheels::files(&dist);
    let names: Vec<&str> = built.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        variant_file("gfx1100"),
        variant_file("gfx942"),
        format!("rocm_sdk_device_gfx942-{VARIANT_VERSION}-py3-none-{PLATFORM}.whl"),
        format!("rocm_sdk_libraries-{VARIANT_VERSION}-py3-none-{PLATFORM}.whl"),
    ] {
        assert!(names.contains(&expected.as_str()), "{expected} missing from {names:?}");
    }
    assert_eq!(names.len(), 8, "the six distributions of tests/wheels.rs and two variants: {names:?}");
    let again = tmp.path().join("again");
    assert_success(&crate::wheels::package(&artifacts, &again, &["--variants=gfx942"]).await, "--variants=gfx942");
    let again = crate::wheels::files(&again);
    let gfx942 = |files: &[(String, Vec<u8>)]| files.iter().find(|(n, _)| *n == variant_file("gfx942")).cloned();
    assert_eq!(gfx942(&again), gfx942(&built), "the same bytes on a second run");
    assert!(!again.iter().any(|(n, _)| *n == variant_file("gfx1100")), "only the targets asked for");

    // The variant wheel holds the device wheel's files under the variant's dist-info.
    let wheel = dist.join(variant_file("gfx942"));
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel).expect("wheel")).expect("zip");
    let mut json = String::new();
    std::io::Read::read_to_string(
        &mut zip.by_name(&format!("rocm_sdk_device-{VARIANT_VERSION}.dist-info/variant.json")).expect("variant.json"),
        &mut json,
    )
    .expect("utf-8");
    // Its bytes are the ones `builder/src/therock/variants.rs` snapshots.
    assert_eq!(json.as_bytes(), quarry_builder::therock::variant_json("gfx942"));
    assert!(zip.by_name("_rocm_sdk_libraries/lib/rocfft/gfx942.kpack").is_ok());
    assert!(zip.by_name("_rocm_sdk_libraries/.devel_links/gfx942.json").is_ok());

    let mut cmd = tokio::process::Command::new(venv().join("bin/python"));
    cmd.arg("-c").arg(CHECK_WHEELS).args(built.iter().filter(|(n, _)| n.ends_with(".whl")).map(|(n, _)| dist.join(n)));
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "RECORD and variant.json check");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "gfx1100 ['amd :: gfx_arch :: gfx1100']\ngfx942 ['amd :: gfx_arch :: gfx942']\n"
    );

    let server = TestServer::start().await;
    for (filename, body) in built {
        let (status, text) = server.upload_bytes(&format!("{ROOT}{filename}"), body).await;
        assert_eq!(status, 201, "{filename}: {text}");
    }
    let variants_json = format!("rocm_sdk_device-{VARIANT_VERSION}-variants.json");
    let (status, page) = server.get_text(&format!("{ROOT}simple/rocm-sdk-device/")).await;
    assert!(status == 200 && page.contains(&variants_json), "{status} {page}");

    // variantlib, with a provider plugin reporting gfx942 where the wheels' plugin-api points.
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = dir.path().join("amd_variant_provider");
    std::fs::create_dir_all(&provider).expect("provider dir");
    std::fs::write(provider.join("__init__.py"), "").expect("provider");
    std::fs::write(provider.join("plugin.py"), format!("{PLUGIN}\nAMDVariantPlugin = Plugin\n")).expect("provider");
    std::fs::write(dir.path().join("pick_variant.py"), SELECT).expect("script");
    let chosen = select_in(&server, "rocm-sdk-device", dir.path(), "gfx942").await;
    assert_eq!(chosen["linked"], variants_json.as_str());
    // variantlib always ends with the null variant (no wheel of this release is one).
    assert_eq!(chosen["labels"], serde_json::json!(["gfx942", "null"]), "gfx1100 is not supported here");
    assert_eq!(chosen["wheel"], variant_file("gfx942").as_str());

    // Without variants: the extras-based device wheel installs, a variant wheel never does.
    for (client, refusal) in [
        ("pip", "No matching distribution found for rocm-sdk-device"),
        ("uv", "rocm-sdk-device==7.1.0 has only unsupported wheel variants"),
    ] {
        let (out, target) = plain_install(&server, client, "rocm-sdk-device-gfx942").await;
        assert_success(&out, &format!("{client} install rocm-sdk-device-gfx942"));
        assert!(target.path().join("_rocm_sdk_libraries/lib/rocfft/gfx942.kpack").is_file());
        let (out, _) = plain_install(&server, client, "rocm-sdk-device").await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(refusal), "{client} must not take a variant wheel:\n{stderr}");
    }
    // uv's variant preview reads the published variants.json but runs no provider plugin (only
    // the ones built into it), so it cannot learn the GPU and installs no device variant: the
    // install through uv is covered with the null variant in
    // `variant_wheels_are_indexed_selected_and_installed`.
    let simple = format!("{}simple/", server.root_url());
    let target = tempfile::tempdir().expect("tempdir");
    let args = ["-v", "--preview-features", "wheel-variants", "--index-url", simple.as_str(), "rocm-sdk-device"];
    let out = uv_pip("install", &args, Some(target.path())).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(&variants_json)
            && stderr.contains("rocm-sdk-device==7.1.0 has only unsupported wheel variants"),
        "{stderr}"
    );
    server.stop().await;
}

/// `--variants` naming a target the artifacts have no device wheel for, or something that is
/// not a GPU target, or given for debs, fails with the reason (and the targets there are).
#[tokio::test(flavor = "multi_thread")]
async fn package_python_refuses_unknown_variant_targets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let artifacts = tmp.path().join("artifacts");
    crate::wheels::tree(&artifacts).await;
    for (request, expected) in [
        (
            "--variants=gfx942,gfx90a",
            "--variants gfx90a: no device wheel for gfx90a, the artifacts (and --target) give device wheels for gfx1100, gfx942",
        ),
        (
            "--variants=mi300x",
            "--variants \"mi300x\": not a GPU target (gfx and its number in lower case, e.g. gfx942, gfx90a or gfx1100)",
        ),
    ] {
        let dist = tmp.path().join(request.replace([',', '='], "_"));
        let out = crate::wheels::package(&artifacts, &dist, &[request]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{request}: {stderr}");
        let written: Vec<String> = match std::fs::read_dir(&dist) {
            Ok(dir) => dir.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        };
        assert!(written.iter().all(|n| !n.ends_with(".whl")), "{request}: no wheel is written: {written:?}");
    }
    let mut cmd = tokio::process::Command::new(quarry_tests::quarry_bin());
    cmd.args(["package", "deb", "--variants", "--rocm-version", "7.1.0", "--artifact-dir"])
        .arg(&artifacts)
        .arg("--dest-dir")
        .arg(tmp.path().join("deb"));
    let out = run(cmd, Duration::from_secs(60)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--variants builds rocm-sdk wheel variants"), "{stderr}");
    assert!(!tmp.path().join("deb").exists(), "refused before anything is unpacked");
}
