//! `infra/template.yaml` against the code it deploys: the EventBridge filter fires for every
//! key layout the indexer handles and for none of the keys the indexer writes (found by running
//! the real indexer) or the audit log's objects, the function deploys the directory `scripts/lambda-build` fills (the
//! bootstrap `tests/lambda_emulator.rs` runs), and the wiring the handler relies on is there.
//! The template is read with cfn-lint's own YAML loader (CloudFormation tags included).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use quarry_index::audit_log::{self, AuditAction, AuditEntry, AuditOutcome};
use quarry_lambda_indexer::classify;
use quarry_store::{Key, MemoryStore, PutOptions, StoreExt};
use quarry_tests::{WheelSpec, run, venv, workspace_root};
use serde_json::Value;

async fn template() -> Value {
    let path = workspace_root().join("infra/template.yaml");
    let mut cmd = tokio::process::Command::new(venv().join("bin/python"));
    cmd.args([
        "-c",
        "import json, sys\nfrom cfnlint.decode import decode\ntemplate, errors = decode(sys.argv[1])\nassert not errors, errors\nprint(json.dumps(template, default=str))",
    ])
    .arg(&path);
    let out = run(cmd, std::time::Duration::from_secs(60)).await;
    assert!(out.status.success(), "decoding {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("template as JSON")
}

/// EventBridge `wildcard`: `*` matches any run of characters, `/` included.
fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == text;
    }
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// The key patterns of the rule, with `${KeyPrefix}` set to `prefix`.
fn key_patterns(template: &Value, prefix: &str) -> Vec<String> {
    let rule = &template["Resources"]["ObjectEventsRule"]["Properties"]["EventPattern"];
    assert_eq!(rule["source"], serde_json::json!(["aws.s3"]));
    assert_eq!(rule["detail-type"], serde_json::json!(["Object Created", "Object Deleted"]));
    rule["detail"]["object"]["key"]
        .as_array()
        .expect("key patterns")
        .iter()
        .map(|p| {
            let sub = p["wildcard"]["Fn::Sub"].as_str().expect("wildcard: !Sub \"${KeyPrefix}...\"");
            sub.replace("${KeyPrefix}", prefix)
        })
        .collect()
}

fn fires(patterns: &[String], key: &str) -> bool {
    patterns.iter().any(|p| wildcard(p, key))
}

/// Every layout the indexer handles, as keys relative to the indexed prefix.
const HANDLED: &[&str] = &[
    "12345678901-linux/python/rocm_sdk_core-7.10.0rc20251124+rocm7.10-py3-none-any.whl",
    "12345678901-linux/python/rocm-7.10.0rc20251124.tar.gz",
    "12345678901-linux/python/legacy-1.0.zip",
    "12345678901-linux/python/rocm_sdk_core-7.10.0-py3-none-any.whl.yanked",
    "12345678901-linux/python/gfx94X-dcgpu/torch-2.9.1+rocm7.10-py3-none-any.whl",
    "python/gfx94X-dcgpu/torch-2.9.1-py3-none-any.whl",
    "12345678901-linux/blas_lib_gfx942.tar.zst",
    "12345678901-linux/blas_lib_gfx942.tar.zst.sha256sum",
    "12345678901-linux/core-runtime_run_generic.tar.xz",
    "12345678901-linux/logs/gfx94X-dcgpu/build.log",
    "12345678901-linux/logs/gfx94X-dcgpu/ninja_log.txt",
    "12345678901-linux/packages/deb/pool/main/amdrocm-fft_7.1.0~dev20260820-12345_amd64.deb",
    "12345678901-linux/packages/rpm/x86_64/amdrocm-fft-7.1.0~dev20260820-12345.x86_64.rpm",
];

#[tokio::test]
async fn event_filters_cover_what_the_indexer_handles_and_skip_what_it_writes() {
    let template = template().await;
    for prefix in ["", "ROCm-TheRock/"] {
        let patterns = key_patterns(&template, prefix);
        for key in HANDLED {
            assert!(classify(key, &Default::default()).unwrap().is_some(), "the indexer handles {key}");
            let full = format!("{prefix}{key}");
            assert!(fires(&patterns, &full), "no event for {full}: {patterns:?}");
        }
        assert!(!fires(&patterns, &format!("other/{}", HANDLED[0])) || prefix.is_empty());
    }

    // Run the real indexer over those files and collect every key it writes.
    let store = Arc::new(MemoryStore::default());
    let mut uploaded = BTreeSet::new();
    for key in HANDLED {
        let body = if key.ends_with(".whl") {
            let name = key.rsplit('/').next().unwrap();
            let mut parts = name.split('-');
            let (dist, version) = (parts.next().unwrap(), parts.next().unwrap());
            let spec = WheelSpec::new(&dist.replace('_', "-"), version);
            assert_eq!(spec.filename(), name, "test wheel names match");
            Bytes::from(spec.build())
        } else {
            Bytes::from_static(b"\x1f\x8b\x08\x00 not much of an archive")
        };
        store.put_bytes(&Key::new(*key).unwrap(), body, PutOptions::default()).await.unwrap();
        uploaded.insert((*key).to_owned());
    }
    let (roots, dirs) = quarry_index::discover(store.as_ref(), "", &Default::default()).await.unwrap();
    assert!(roots.len() >= 3 && dirs.len() >= 3, "{roots:?} {dirs:?}");
    let indexer = quarry_index::Indexer::new(store.clone(), Default::default());
    for root in &roots {
        indexer.reindex(root).await.unwrap();
    }
    for dir in &dirs {
        quarry_index::update_listing(store.as_ref(), dir).await.unwrap();
    }
    let all = store.list_all("", false).await.unwrap();
    let written: Vec<String> =
        all.objects.iter().map(|o| o.key.to_string()).filter(|k| !uploaded.contains(k)).collect();
    assert!(written.iter().any(|k| k.ends_with(".metadata")) && written.iter().any(|k| k.ends_with("index.json")));
    assert!(written.iter().any(|k| k.ends_with(".quarry-listing.json")), "{written:?}");
    // The audit log's objects (one beside every write, refusals too): no event, no scope.
    let mut audited = Vec::new();
    for (key, outcome) in [
        (HANDLED[0], AuditOutcome::Ok),
        ("12345678901-linux/logs/gfx94X-dcgpu/build.log", AuditOutcome::Ok),
        ("12345678901-", AuditOutcome::Ok),
        ("../escape.whl", AuditOutcome::Refused),
    ] {
        let entry = AuditEntry::now(AuditAction::Upload, "ci", key, outcome);
        audited.push(audit_log::append(store.as_ref(), &entry).await.unwrap().to_string());
    }
    for prefix in ["", "ROCm-TheRock/"] {
        let patterns = key_patterns(&template, prefix);
        for key in &audited {
            assert_eq!(
                classify(key, &Default::default()).unwrap(),
                None,
                "the indexer would react to the audit log's {key}"
            );
            let full = format!("{prefix}{key}");
            assert!(!fires(&patterns, &full), "an event would fire for the audit log's {full}");
        }
    }
    for prefix in ["", "ROCm-TheRock/"] {
        let patterns = key_patterns(&template, prefix);
        for key in &written {
            assert_eq!(classify(key, &Default::default()).unwrap(), None, "the indexer would react to its own {key}");
            let full = format!("{prefix}{key}");
            assert!(!fires(&patterns, &full), "an event would fire for the indexer's own {full}");
        }
    }
}

#[tokio::test]
async fn the_template_deploys_the_tested_bootstrap_with_the_wiring_the_handler_needs() {
    let template = template().await;
    let function = &template["Resources"]["IndexerFunction"]["Properties"];
    let code = workspace_root().join("infra").join(function["CodeUri"].as_str().unwrap());
    let built = workspace_root().join("target/lambda/quarry-lambda-indexer");
    assert_eq!(
        std::fs::canonicalize(&code).ok(),
        std::fs::canonicalize(&built).ok(),
        "CodeUri must be the directory scripts/lambda-build fills ({})",
        built.display()
    );
    assert!(built.join("bootstrap").exists(), "run scripts/lambda-build (scripts/test does)");
    assert_eq!(function["Handler"], "bootstrap");
    assert_eq!(function["Runtime"], "provided.al2023");
    let sqs = &function["Events"]["ObjectEvents"]["Properties"];
    assert_eq!(sqs["FunctionResponseTypes"], serde_json::json!(["ReportBatchItemFailures"]));
    assert!(sqs["BatchSize"].as_u64().is_some_and(|n| n <= 10));
    let queue = &template["Resources"]["EventQueue"]["Properties"];
    assert!(queue["RedrivePolicy"]["deadLetterTargetArn"].is_object(), "a dead-letter queue");
    assert!(template["Resources"]["DeadLetterAlarm"].is_object(), "an alarm on the dead-letter queue");
    // Least privilege: object access only under the indexed prefix, listing only of it.
    let statements = function["Policies"][0]["Statement"].as_array().unwrap();
    let objects = statements.iter().find(|s| s["Sid"] == "ReadWriteIndexedPrefix").unwrap();
    assert_eq!(objects["Resource"]["Fn::Sub"], "arn:${AWS::Partition}:s3:::${BucketName}/${KeyPrefix}*");
    let list = statements.iter().find(|s| s["Sid"] == "ListIndexedPrefix").unwrap();
    assert_eq!(list["Condition"]["StringLike"]["s3:prefix"]["Fn::Sub"], "${KeyPrefix}*");
    assert!(function["Environment"]["Variables"]["QUARRY_KEY_PREFIX"].is_object(), "the function is told its prefix");
}

#[tokio::test]
async fn a_schedule_invokes_the_indexer_to_reconcile_and_only_it_may() {
    let template = template().await;
    let resources = template["Resources"].as_object().unwrap();
    let rule = &resources["ReconcileRule"];
    assert_eq!(rule["Type"], "AWS::Events::Rule");
    assert_eq!(rule["Properties"]["ScheduleExpression"], serde_json::json!({"Ref": "ReconcileSchedule"}));
    assert_eq!(rule["Properties"]["State"], "ENABLED");
    assert!(rule["Properties"]["EventPattern"].is_null(), "a schedule, not an event pattern");
    let parameter = &template["Parameters"]["ReconcileSchedule"];
    assert_eq!(parameter["Default"], "rate(6 hours)");
    let targets = rule["Properties"]["Targets"].as_array().unwrap();
    assert_eq!(targets.len(), 1, "{targets:?}");
    assert_eq!(targets[0]["Arn"], serde_json::json!({"Fn::GetAtt": ["IndexerFunction", "Arn"]}));
    assert!(targets[0]["Input"].is_null(), "the handler gets EventBridge's own Scheduled Event");

    // Every permission EventBridge has on the function names its rule; the schedule's is there.
    let permissions: Vec<&Value> = resources.values().filter(|r| r["Type"] == "AWS::Lambda::Permission").collect();
    assert_eq!(permissions.len(), 1, "{permissions:?}");
    let permission = &permissions[0]["Properties"];
    assert_eq!(permission["Action"], "lambda:InvokeFunction");
    assert_eq!(permission["Principal"], "events.amazonaws.com");
    assert_eq!(permission["FunctionName"], serde_json::json!({"Fn::GetAtt": ["IndexerFunction", "Arn"]}));
    assert_eq!(permission["SourceArn"], serde_json::json!({"Fn::GetAtt": ["ReconcileRule", "Arn"]}));
    assert_eq!(permissions[0]["Condition"], rule["Condition"], "both exist together");

    // The function knows which bucket a scheduled event means, and how many runs to cover.
    let variables = &resources["IndexerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(variables["QUARRY_BUCKET"], serde_json::json!({"Ref": "BucketName"}));
    assert_eq!(variables["QUARRY_RECONCILE_RUNS"], serde_json::json!({"Ref": "ReconcileRuns"}));

    // The event that rule delivers is the one the handler's tests are fed.
    let fixture = workspace_root().join("lambda-indexer/tests/events/scheduled.json");
    let event: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    assert_eq!(
        (event["source"].as_str(), event["detail-type"].as_str()),
        (Some("aws.events"), Some("Scheduled Event"))
    );
}

#[tokio::test]
async fn cfn_lint_finds_nothing() {
    let mut cmd = tokio::process::Command::new(venv().join("bin/cfn-lint"));
    cmd.arg(workspace_root().join("infra/template.yaml"));
    let out = run(cmd, std::time::Duration::from_secs(120)).await;
    assert!(
        out.status.success(),
        "cfn-lint infra/template.yaml:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn wildcards_match_like_eventbridge() {
    assert!(wildcard("*.whl", "a/b/c.whl"));
    assert!(wildcard("p/*.whl", "p/x/y.whl"));
    assert!(!wildcard("p/*.whl", "q/x.whl"));
    assert!(!wildcard("*.whl", "a.whl.metadata"));
    assert!(wildcard("*.whl.yanked", "a.whl.yanked"));
    assert!(!wildcard("*.tar.gz", "x.gz"));
}
