use super::*;

fn inputs(event: &str) -> Inputs {
    Inputs {
        run_id: "100".into(),
        event_name: event.into(),
        commit_ref: "main".into(),
        base_ref: None,
        build_variant: "release".into(),
        release_type: "ci".into(),
        build_python_packages: true,
        build_pytorch: true,
        ..Default::default()
    }
}

fn run(i: &Inputs, git: &GitContext) -> Result<Outputs, CiError> {
    configure(&Matrix::builtin(), i, git, &["foundation".into(), "math-libs".into()], &mut FirstPicker)
}

fn families(c: &Option<BuildConfig>) -> String {
    c.as_ref().map(|c| c.dist_amdgpu_families.clone()).unwrap_or_else(|| "-".into())
}

#[test]
fn builtin_matrix_parses_and_lists_families_in_trigger_order() {
    let m = Matrix::builtin();
    let keys: Vec<&str> = m.families.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(&keys[..6], ["gfx94x", "gfx110x", "gfx1151", "gfx120x", "gfx90a", "gfx950"]);
    assert_eq!(keys.len(), 16);
}

#[test]
fn events_select_progressively_larger_sets() {
    let git = GitContext::default();
    let pr = run(&inputs("pull_request"), &git).unwrap();
    assert_eq!(families(&pr.linux), "gfx94X-dcgpu;gfx110X-all;gfx1151;gfx120X-all");
    assert_eq!(families(&pr.windows), "gfx110X-all;gfx1151;gfx120X-all");
    let push = run(&inputs("push"), &git).unwrap();
    assert_eq!(families(&push.linux), "gfx94X-dcgpu;gfx110X-all;gfx1151;gfx120X-all;gfx90a;gfx950-dcgpu");
    let nightly = run(&inputs("schedule"), &git).unwrap();
    assert_eq!(nightly.linux.as_ref().unwrap().per_family_info.len(), 16);
    assert_eq!(nightly.test_type, TestType::Comprehensive);
    let mut dispatch = inputs("workflow_dispatch");
    dispatch.linux_amdgpu_families = vec!["gfx94x".into()];
    dispatch.windows_amdgpu_families = vec!["gfx94x".into()];
    let d = run(&dispatch, &git).unwrap();
    assert_eq!(families(&d.linux), "gfx94X-dcgpu");
    assert!(d.windows.is_none(), "gfx94x has no windows entry");
    assert_eq!(d.linux.unwrap().windows_amdgpu_families, "");
}

#[test]
fn labels_extend_skip_and_steer_tests() {
    let git = GitContext::default();
    let mut pr = inputs("pull_request");
    pr.pr_labels = vec!["gfx950-dcgpu".into(), "test:rocprim".into()];
    pr.linux_test_labels = vec!["test:rocprim".into()];
    let out = run(&pr, &git).unwrap();
    assert!(families(&out.linux).ends_with(";gfx950-dcgpu"));
    assert_eq!(out.test_type, TestType::Full);
    assert_eq!(out.github_output()[4], ("linux_test_labels", "['test:rocprim']".to_owned()));

    pr.pr_labels = vec!["ci:skip".into()];
    let skipped = run(&pr, &git).unwrap();
    assert!(!skipped.enabled);
    assert_eq!(skipped.github_output()[0].1, "false");
    assert_eq!(skipped.github_output()[1].1, "");

    pr.pr_labels = vec!["gfx9999".into()];
    let err = run(&pr, &git).unwrap_err().to_string();
    assert!(err.starts_with("Unknown GPU families: ['gfx9999']. Known families: ['gfx101x', "), "{err}");

    pr.pr_labels = vec!["test_filter:bogus".into()];
    assert_eq!(
        run(&pr, &git).unwrap_err().to_string(),
        "Unrecognized test_filter value: 'bogus'. Valid values: ['comprehensive', 'full', 'quick', 'standard']"
    );
    assert!(matches!(run(&inputs("release"), &git), Err(CiError::UnsupportedEvent(_))));
}

#[test]
fn asan_variants_follow_trigger_and_labels() {
    let git = GitContext::default();
    let mut pr = inputs("pull_request");
    pr.build_variant = "asan".into();
    assert!(!run(&pr, &git).unwrap().enabled, "asan on a PR needs a label");
    pr.pr_labels = vec!["ci:asan".into()];
    let out = run(&pr, &git).unwrap();
    let linux = out.linux.unwrap();
    assert_eq!((linux.build_variant_label.as_str(), linux.artifact_group.as_str()), ("asan", "multi-arch-asan"));
    assert_eq!(linux.build_runs_on, "azure-linux-scale-rocm-heavy-ramdisk");
    assert!(!linux.build_python_packages);
    assert!(out.windows.is_none(), "windows has no asan variant");

    let mut push = inputs("push");
    push.build_variant = "asan".into();
    let linux = run(&push, &git).unwrap().linux.unwrap();
    assert_eq!(linux.build_variant_label, "host-asan");
    assert!(linux.build_python_packages, "host-asan still builds Python packages");
    assert!(linux.per_family_info.iter().all(|f| f.test_runs_on.is_empty()));

    let mut nightly = inputs("schedule");
    nightly.build_variant = "asan".into();
    let linux = run(&nightly, &git).unwrap().linux.unwrap();
    assert_eq!(families(&Some(linux.clone())), "gfx94X-dcgpu;gfx950-dcgpu");
    assert_eq!(linux.per_family_info[0].test_runs_on, "linux-mi325-gpu-rocm-cpu-sandbox");
}

#[test]
fn path_filters_and_submodules() {
    let m = Matrix::builtin();
    let files = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(!is_ci_run_required(&m, &files(&["docs/a/b.md", "README.md", "x/LICENSE"])));
    assert!(!is_ci_run_required(&m, &[]));
    assert!(is_ci_run_required(&m, &files(&["docs/x.md", "cmake/foo.cmake"])));
    assert!(is_ci_run_required(&m, &files(&[".github/workflows/multi_arch_ci.yml"])));
    assert!(!is_ci_run_required(&m, &files(&[".github/workflows/unrelated.yml"])));

    let git = GitContext {
        changed_files: Some(files(&["rocm-libraries", "README.md"])),
        submodule_paths: Some(files(&["rocm-libraries", "rocm-systems"])),
    };
    let out = run(&inputs("push"), &git).unwrap();
    assert_eq!(out.test_type, TestType::Standard);
    assert_eq!(out.test_type_reason, "submodule(s) changed: ['rocm-libraries']");
    let linux = out.linux.unwrap();
    let gfx90a = linux.per_family_info.iter().find(|f| f.amdgpu_family == "gfx90a").unwrap();
    assert_eq!(gfx90a.test_runs_on, "linux-gfx90a-1gpu-ossci-rocm", "submodule bump enables its tests");
}

#[test]
fn prebuilt_stages_expand_all_and_keep_order() {
    let mut i = inputs("workflow_dispatch");
    i.linux_amdgpu_families = vec!["gfx110x".into()];
    i.prebuilt_stages = "math-libs, foundation,math-libs".into();
    let linux = run(&i, &GitContext::default()).unwrap().linux.unwrap();
    assert_eq!(linux.prebuilt_stages, "math-libs,foundation");
    i.prebuilt_stages = "all".into();
    assert_eq!(run(&i, &GitContext::default()).unwrap().linux.unwrap().prebuilt_stages, "foundation,math-libs");
}

#[test]
fn wheel_matrices_follow_release_type() {
    let mut i = inputs("schedule");
    i.release_type = "nightly".into();
    i.build_jax = true;
    i.linux_amdgpu_families = vec!["gfx90c".into(), "gfx94x".into()];
    i.windows_amdgpu_families = vec!["none".into()];
    let out = run(&i, &GitContext::default()).unwrap();
    assert!(out.windows.is_none());
    let linux = out.linux.unwrap();
    // 5 Python versions × (3 stable refs + nightly); gfx90c left out of 2.13/2.14.
    assert_eq!(linux.pytorch_build_matrix.len(), 20);
    let row = linux.pytorch_build_matrix.iter().find(|r| r.pytorch_git_ref == "release/2.13").unwrap();
    assert_eq!(row.amdgpu_families, "gfx94X-dcgpu");
    // 4 Python versions × 4 refs, minus 3.11 for the two 0.11 refs.
    assert_eq!(linux.jax_build_matrix.len(), 14);
    assert!(linux.build_jax);
    i.release_type = "weekly".into();
    assert_eq!(run(&i, &GitContext::default()).unwrap_err().to_string(), "Unknown release_type: 'weekly'");
}

#[test]
fn seeded_picker_is_stable_per_run_and_follows_weights() {
    let labels = vec![
        RunnerLabel { label: "a".into(), count: Some(5), weight: None },
        RunnerLabel { label: "b".into(), count: Some(28), weight: None },
    ];
    let picks = |seed: &str| {
        let mut p = SeededPicker::new(seed);
        (0..6).map(|_| p.pick(&labels, "ctx")).collect::<Vec<_>>()
    };
    assert_eq!(picks("123"), picks("123"));
    let mut counts = [0usize; 2];
    for run in 0..2000 {
        for i in picks(&run.to_string()) {
            counts[i] += 1;
        }
    }
    let share = counts[1] as f64 / (counts[0] + counts[1]) as f64;
    assert!((0.80..0.90).contains(&share), "b got {share} of picks, expected about 28/33");
}

#[test]
fn matrix_data_errors_name_the_entry() {
    let text = include_str!("../data/ci_matrix.toml");
    let dup = format!("{text}\n[[family]]\nkey = \"gfx94x\"\ntrigger = \"nightly\"\n");
    assert!(Matrix::parse(&dup).unwrap_err().to_string().contains("\"gfx94x\" is defined twice"));
    let bad_variant =
        text.replacen("build_variants = [\"release\", \"asan\", \"tsan\"]", "build_variants = [\"msan\"]", 1);
    let err = Matrix::parse(&bad_variant).unwrap_err().to_string();
    assert!(err.contains("gfx950 linux: build variant \"msan\""), "{err}");
    let unknown_key = text.replacen("family = \"gfx90a\"", "family = \"gfx90a\"\nflavour = 1", 1);
    assert!(Matrix::parse(&unknown_key).unwrap_err().to_string().contains("flavour"));
}
