//! `quarry promote` on a real S3 server (moto on loopback): the run's files are copied with
//! `CopyObject` (no byte through the client), the channel's family index is published into the
//! bucket and pip installs from the bucket's URLs; promoting again copies nothing.

use std::sync::Arc;
use std::time::Duration;

use quarry_store::{Key, PutOptions, S3Store, StoreExt};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{WheelSpec, assert_success, installed, pip_install, quarry_bin, run};

#[tokio::test(flavor = "multi_thread")]
async fn promotion_into_a_bucket_copies_server_side_and_pip_installs_from_it() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, "releases").await;
    let store = Arc::new(S3Store::from_client(client.clone(), "releases", ""));
    let wheels = [
        WheelSpec::new("rocm-sdk-core", "7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.0.0").requires("rocm-sdk-core==7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx120X-all", "7.0.0").requires("rocm-sdk-core==7.0.0"),
    ];
    for w in &wheels {
        let key = Key::new(format!("700-linux/python/{}", w.filename())).unwrap();
        store.put_bytes(&key, w.build().into(), PutOptions::default()).await.unwrap();
    }
    let quarry = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(args).envs(server.client_env()).env_remove("QUARRY_CONFIG");
        run(cmd, Duration::from_secs(120))
    };
    assert_success(&quarry(&["index", "s3://releases/"]).await, "quarry index");
    let promote = ["promote", "--from", "700-linux", "--to", "nightly", "--store", "s3://releases/", "--json"];
    let out = quarry(&promote).await;
    assert_success(&out, "quarry promote s3://");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "core to both families, each family's libraries: {report:#}");
    assert!(files.iter().all(|f| f["method"] == "server-side"), "{report:#}");
    let install = report["install"].as_array().unwrap();
    let pip = install.iter().filter_map(|l| l.as_str()?.strip_prefix("pip: --index-url ")).collect::<Vec<_>>();
    assert!(pip.iter().any(|u| u.ends_with("/releases/nightly/python/gfx94X-dcgpu/simple/")), "{install:?}");

    // The channel's reindex took the run's entries at the copies' ETags (nothing read again):
    // they carry the run's provenance, and the copied `.metadata` sidecar is the one named.
    let page = Key::new("nightly/python/gfx94X-dcgpu/simple/rocm-sdk-core/index.json").unwrap();
    let page: serde_json::Value = serde_json::from_slice(&store.get_bytes(&page, 1 << 20).await.unwrap().1).unwrap();
    let file = &page["files"][0];
    assert_eq!((&file["_quarry_source_run"], &file["_quarry_source_platform"]), (&"700".into(), &"linux".into()));
    let sidecar = Key::new(format!("nightly/python/gfx94X-dcgpu/{}.metadata", wheels[0].filename())).unwrap();
    let sidecar = quarry_store::sha256_hex(&store.get_bytes(&sidecar, 1 << 20).await.unwrap().1);
    assert_eq!(file["core-metadata"]["sha256"], sidecar.as_str(), "{page:#}");

    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("site");
    // A bare bucket maps no directory URL to its index.html (the CDN function does): the
    // family root's find-links page.
    let find_links = format!("{}/releases/nightly/python/gfx94X-dcgpu/index.html", server.endpoint);
    let out =
        pip_install(&["--no-index", "--find-links", &find_links, "rocm-sdk-libraries-gfx94X-dcgpu"], &target).await;
    assert_success(&out, "pip install from the bucket's channel");
    assert_eq!(
        installed(&target),
        ["rocm_sdk_core-7.0.0.dist-info", "rocm_sdk_libraries_gfx94X_dcgpu-7.0.0.dist-info"]
    );

    let out = quarry(&promote).await;
    assert_success(&out, "quarry promote again");
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["status"] == "same" && f["method"].is_null()));
    server.stop().await;
}
