//! The workflow run as `configure_multi_arch_ci.py` reads it: its environment variables and
//! event payload into [`Inputs`], and the [`GitContext`] a run has without a checkout. Pure:
//! the caller looks the variables up, reads and parses the payload, and runs git.

use serde_json::Value;

use crate::{CiError, GitContext, Inputs, comma_list};

/// The `before` of a push that created its branch: there is nothing to diff against.
const NULL_SHA: &str = "0000000000000000000000000000000000000000";

impl Inputs {
    /// The inputs of a workflow run. `lookup` gives an environment variable's value (None when
    /// unset: TheRock's default applies: `BUILD_VARIANT=release`, `RELEASE_TYPE=ci`,
    /// `BUILD_PYTHON_PACKAGES`/`BUILD_PYTORCH` on, `BUILD_JAX` off, the rest empty;
    /// `GITHUB_EVENT_NAME` is required). `event` is the parsed payload (`Null` without one): a
    /// pull request's labels (lowercased; its `test:` ones join both platforms' test labels)
    /// and the diff base (`HEAD^` for a pull request, a push's `before`, else `HEAD^1`; none
    /// for a push that created its branch).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, event: &Value) -> Result<Self, CiError> {
        let var = |name: &str, default: &str| lookup(name).unwrap_or_else(|| default.to_owned());
        let on = |name: &str, default: &str| !var(name, default).eq_ignore_ascii_case("false");
        let event_name = lookup("GITHUB_EVENT_NAME").ok_or(CiError::MissingVariable("GITHUB_EVENT_NAME"))?;
        let (pr_labels, base_ref) = event_facts(&event_name, event);
        let pr_test_labels: Vec<String> = pr_labels.iter().filter(|l| l.starts_with("test:")).cloned().collect();
        let with_pr = |name: &str| [comma_list(&var(name, "")), pr_test_labels.clone()].concat();
        let python_version = var("PYTHON_VERSION", "").trim().to_owned();
        Ok(Inputs {
            run_id: var("GITHUB_RUN_ID", ""),
            commit_ref: var("GITHUB_REF_NAME", ""),
            base_ref,
            build_variant: var("BUILD_VARIANT", "release"),
            release_type: var("RELEASE_TYPE", "ci"),
            build_python_packages: on("BUILD_PYTHON_PACKAGES", "true"),
            build_pytorch: on("BUILD_PYTORCH", "true"),
            build_jax: on("BUILD_JAX", "false"),
            python_versions: if python_version.is_empty() { Vec::new() } else { vec![python_version] },
            linux_amdgpu_families: comma_list(&var("LINUX_AMDGPU_FAMILIES", "")),
            windows_amdgpu_families: comma_list(&var("WINDOWS_AMDGPU_FAMILIES", "")),
            linux_test_labels: with_pr("LINUX_TEST_LABELS"),
            windows_test_labels: with_pr("WINDOWS_TEST_LABELS"),
            prebuilt_stages: var("PREBUILT_STAGES", ""),
            baseline_run_id: var("BASELINE_RUN_ID", ""),
            baseline_repository: var("THEROCK_REPOSITORY", ""),
            external_repo: var("EXTERNAL_REPO", ""),
            pr_labels,
            event_name,
        })
    }
}

/// A run's PR labels (lowercased) and the ref its changed files are diffed against.
fn event_facts(event_name: &str, event: &Value) -> (Vec<String>, Option<String>) {
    match event_name {
        "pull_request" => {
            let labels = event.pointer("/pull_request/labels").and_then(Value::as_array);
            let names = labels.into_iter().flatten().filter_map(|l| l["name"].as_str()).map(str::to_lowercase);
            (names.collect(), Some("HEAD^".into()))
        }
        "push" => match event["before"].as_str() {
            Some(NULL_SHA) => (Vec::new(), None),
            Some(before) if !before.is_empty() => (Vec::new(), Some(before.to_owned())),
            _ => (Vec::new(), Some("HEAD^1".into())),
        },
        _ => (Vec::new(), Some("HEAD^1".into())),
    }
}

impl GitContext {
    /// The context a run has without looking at a checkout: an external repository's (the
    /// name of `EXTERNAL_REPO`'s `repository`, see [`GitContext::external`]), or none for
    /// events without path filters (all but pull_request and push). `Ok(None)`: the caller
    /// diffs the checkout against [`Inputs::base_ref`] and lists its submodules (no base ref:
    /// no diff, [`GitContext::default`]).
    pub fn without_checkout(inputs: &Inputs) -> Result<Option<Self>, CiError> {
        if !inputs.external_repo.is_empty() {
            let raw = &inputs.external_repo;
            let repo: Value = serde_json::from_str(raw).map_err(|_| CiError::ExternalRepoJson(raw.clone()))?;
            let full = repo["repository"].as_str().filter(|r| !r.is_empty());
            let full = full.ok_or_else(|| CiError::ExternalRepoField(raw.clone()))?;
            return Ok(Some(GitContext::external(full.rsplit('/').next().unwrap_or(full))));
        }
        if !matches!(inputs.event_name.as_str(), "pull_request" | "push") {
            return Ok(Some(GitContext::default()));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn pull_request_labels_and_defaults() {
        let event = serde_json::json!({"pull_request": {"labels": [{"name": "Test:Foo"}, {"name": "gfx950"}]}});
        let vars = [("GITHUB_EVENT_NAME", "pull_request"), ("LINUX_TEST_LABELS", "A, b"), ("PYTHON_VERSION", " ")];
        let inputs = Inputs::from_lookup(lookup(&vars), &event).unwrap();
        assert_eq!(inputs.pr_labels, ["test:foo", "gfx950"]);
        assert_eq!(inputs.linux_test_labels, ["a", "b", "test:foo"]);
        assert_eq!(inputs.windows_test_labels, ["test:foo"]);
        assert_eq!(inputs.base_ref.as_deref(), Some("HEAD^"));
        assert_eq!((inputs.build_variant.as_str(), inputs.release_type.as_str()), ("release", "ci"));
        assert!(inputs.build_python_packages && inputs.build_pytorch && !inputs.build_jax);
        assert!(inputs.python_versions.is_empty());
    }

    #[test]
    fn push_bases_and_missing_event() {
        let push = |before: &str| {
            let event = serde_json::json!({ "before": before });
            Inputs::from_lookup(lookup(&[("GITHUB_EVENT_NAME", "push")]), &event).unwrap().base_ref
        };
        assert_eq!(push(NULL_SHA), None);
        assert_eq!(push("abc").as_deref(), Some("abc"));
        assert_eq!(push("").as_deref(), Some("HEAD^1"));
        assert_eq!(Inputs::from_lookup(lookup(&[]), &Value::Null), Err(CiError::MissingVariable("GITHUB_EVENT_NAME")));
    }

    #[test]
    fn external_repositories_need_no_checkout() {
        let inputs = |event: &str, external: &str| Inputs {
            event_name: event.into(),
            external_repo: external.into(),
            ..Default::default()
        };
        let known = GitContext::without_checkout(&inputs("push", r#"{"repository": "ROCm/rocm-libraries"}"#));
        assert_eq!(known, Ok(Some(GitContext::external("rocm-libraries"))));
        assert_eq!(GitContext::without_checkout(&inputs("schedule", "")), Ok(Some(GitContext::default())));
        assert_eq!(GitContext::without_checkout(&inputs("push", "")), Ok(None));
        let err = GitContext::without_checkout(&inputs("push", "{")).unwrap_err();
        assert_eq!(err.to_string(), "EXTERNAL_REPO contains invalid JSON: \"{\"");
        let err = GitContext::without_checkout(&inputs("push", "{}")).unwrap_err();
        assert_eq!(err.to_string(), "EXTERNAL_REPO missing 'repository' field: \"{}\"");
    }
}
