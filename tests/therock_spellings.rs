//! TheRock's spellings: every flag of a TheRock script that a Quarry command replaces, typed as
//! TheRock's users type it, runs the real `quarry` binary with the same meaning, or is refused
//! (exit 2) with a message naming Quarry's spelling; never clap's "unexpected argument".
//!
//! [`CASES`] is the table of `docs/therock.md` ("Flag by flag"): script, flag, Quarry spelling.
//! Each row runs in a fresh directory set up for it (a topology, a build tree, a staged run, a
//! packages directory, packaging artifacts). "Same meaning" is checked by running Quarry's own
//! spelling in a second fresh directory and comparing what both left behind (every file, with
//! its bytes and links) and, where the row says so, their stdout. A test checks that the
//! guide's table and [`CASES`] are the same rows, so neither drifts from the other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use quarry_tests::native::artifact;
use quarry_tests::{WheelSpec, assert_success, quarry_bin, run, sha256_hex, workspace_root};

/// What a row's directory holds before the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// `BUILD_TOPOLOGY.toml`.
    Topology,
    /// The topology and a stage build's `build/artifacts/`.
    Build,
    /// The build, pushed as run 1 (linux) into `staging/`.
    Staged,
    /// A packages directory as `build_python_packages.py` leaves it (`packages/dist/`), and a
    /// directory of built packages as `build_package.py` leaves it (`debs/`).
    Packages,
    /// TheRock artifacts `quarry package` builds debs from (`artifacts/`).
    Artifacts,
    /// TheRock's `version.json` (ROCm 7.1.0).
    Version,
}

/// What a row proves.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// Exit 0: Quarry takes the flag as TheRock spells it, with TheRock's meaning.
    Runs,
    /// Exit 0, and the same effect as Quarry's own spelling: the same files left in the
    /// directory below `compare` (`""`: all of it), and the same stdout when `stdout`.
    Same { quarry: &'static [&'static str], compare: &'static str, stdout: bool },
    /// Exit 0, and every needle in stdout (or stderr, `on_stderr`).
    Prints { needles: &'static [&'static str], on_stderr: bool },
    /// Exit 2, the message naming Quarry's spelling.
    Refused { names: &'static str },
}

/// One row of the guide's table.
struct Case {
    /// The TheRock script (and subcommand).
    script: &'static str,
    /// The flag as TheRock spells it.
    flag: &'static str,
    /// Quarry's spelling, as the guide's table shows it.
    quarry: &'static str,
    setup: Setup,
    /// The command line run (after `quarry`), in TheRock's spelling.
    args: &'static [&'static str],
    check: Check,
}

const fn case(
    script: &'static str,
    flag: &'static str,
    quarry: &'static str,
    setup: Setup,
    args: &'static [&'static str],
    check: Check,
) -> Case {
    Case { script, flag, quarry, setup, args, check }
}

use Check::{Prints, Refused, Runs, Same};
use Setup::{Artifacts, Build, Packages, Staged, Topology, Version};

const CONFIGURE: &str = "configure_stage.py";
const VERSION: &str = "compute_rocm_package_version.py";
const FETCH: &str = "artifact_manager.py fetch";
const PUSH: &str = "artifact_manager.py push";
const COPY: &str = "artifact_manager.py copy";
const INFO: &str = "artifact_manager.py info";
const LIST: &str = "artifact_manager.py list-stages";
const LEGACY: &str = "fetch_artifacts.py";
const BUILD: &str = "build_package.py";
const PYTHON: &str = "upload_python_packages.py";
const REPO: &str = "upload_package_repo.py";

/// A `configure_stage.py` refusal names `--stage`.
const WHOLE_STAGES: Check = Refused { names: "quarry stage configure --stage STAGE" };

/// A packaging command line with `extra` flags (`quarry package deb …`).
macro_rules! package {
    ($($extra:expr),*) => {
        &["package", "deb", "--artifacts-dir", "artifacts", "--dest-dir", "out", "--rocm-version", "7.1.0",
          "--pkg-names", "amdrocm-fft", $($extra),*]
    };
}

/// A version command line with `extra` flags (`quarry version …` over `version.json`).
macro_rules! version {
    ($($extra:expr),*) => {
        &["version", "--version-file", "version.json", $($extra),*]
    };
}

/// The table: every flag of the scripts Quarry replaces.
const CASES: &[Case] = &[
    // compute_rocm_package_version.py → quarry version
    case(
        VERSION,
        "--release-type",
        "`quarry version --release-type`",
        Version,
        version!("--release-type", "nightly"),
        Prints { needles: &["pip  7.1.0a20231114"], on_stderr: false },
    ),
    case(
        VERSION,
        "--custom-version-suffix",
        "`--custom-version-suffix`",
        Version,
        version!("--custom-version-suffix", ".post1"),
        Prints { needles: &["pip  7.1.0.post1"], on_stderr: false },
    ),
    case(
        VERSION,
        "--prerelease-version",
        "`--prerelease-version`",
        Version,
        version!("--release-type", "prerelease", "--prerelease-version", "2"),
        Prints { needles: &["pip  7.1.0rc2"], on_stderr: false },
    ),
    case(
        VERSION,
        "--override-base-version",
        "`--override-base-version`",
        Version,
        version!("--release-type", "nightly", "--override-base-version", "7.2.0"),
        Prints { needles: &["pip  7.2.0a20231114"], on_stderr: false },
    ),
    case(
        VERSION,
        "--override-git-sha",
        "`--override-git-sha`",
        Version,
        version!("--release-type", "dev", "--override-git-sha", "0123456789abcdef0123456789abcdef01234567"),
        Prints { needles: &["pip  7.1.0.dev0+0123456789abcdef0123456789abcdef01234567"], on_stderr: false },
    ),
    // configure_stage.py → quarry stage configure
    case(
        CONFIGURE,
        "--stage",
        "`quarry stage configure --stage`",
        Topology,
        &["stage", "configure", "--stage", "math-libs"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--amdgpu-families",
        "`--amdgpu-families`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--amdgpu-families", "gfx94X-dcgpu"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--dist-amdgpu-families",
        "`--dist-amdgpu-families`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--dist-amdgpu-families", "gfx94X-dcgpu;gfx110X-all"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--output-cmake-args",
        "`--output-cmake-args`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--output-cmake-args", "args.txt"],
        Runs,
    ),
    case(CONFIGURE, "--print", "`--print`", Topology, &["stage", "configure", "--stage", "math-libs", "--print"], Runs),
    case(
        CONFIGURE,
        "--comments",
        "`--comments`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--comments"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--oneline",
        "`--oneline`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--oneline"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--gha-output",
        "`--gha-output`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--gha-output"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--platform",
        "`--platform`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--platform", "windows"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--manylinux",
        "`--manylinux`",
        Topology,
        &["stage", "configure", "--stage", "math-libs", "--manylinux"],
        Runs,
    ),
    case(
        CONFIGURE,
        "--list-stages",
        "`quarry stage configure --list-stages` (on stderr; `quarry stage list` on stdout)",
        Topology,
        &["stage", "configure", "--list-stages"],
        Prints {
            needles: &["Available build stages:", "  foundation (generic): ", "  math-libs (per-arch): "],
            on_stderr: true,
        },
    ),
    case(
        CONFIGURE,
        "--projects",
        "refused: `--stage`",
        Topology,
        &["stage", "configure", "--projects", "hip", "blas"],
        WHOLE_STAGES,
    ),
    case(
        CONFIGURE,
        "--list-projects",
        "refused: `--stage`",
        Topology,
        &["stage", "configure", "--list-projects"],
        WHOLE_STAGES,
    ),
    case(
        CONFIGURE,
        "--build-dir",
        "refused: `--stage`",
        Topology,
        &["stage", "configure", "--projects", "hip", "--build-dir", "build"],
        WHOLE_STAGES,
    ),
    case(
        CONFIGURE,
        "--skip-stages",
        "refused: `--stage`",
        Topology,
        &["stage", "configure", "--projects", "hip", "--skip-stages"],
        WHOLE_STAGES,
    ),
    // artifact_manager.py fetch → quarry artifacts fetch
    case(
        FETCH,
        "--run-id",
        "`quarry artifacts fetch --run-id`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--run-id", "1"],
        Runs,
    ),
    case(
        FETCH,
        "--platform",
        "`--platform`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--platform", "linux"],
        Runs,
    ),
    case(
        FETCH,
        "--run-github-repo",
        "`--run-github-repo`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--run-github-repo", "ROCm/TheRock"],
        Runs,
    ),
    case(
        FETCH,
        "--local-staging-dir",
        "`--local-staging-dir`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--local-staging-dir", "staging"],
        Runs,
    ),
    case(
        FETCH,
        "--topology",
        "`--topology`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--topology", "BUILD_TOPOLOGY.toml"],
        Runs,
    ),
    case(
        FETCH,
        "--stage",
        "`--stage`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--stage", "math-libs"],
        Runs,
    ),
    case(FETCH, "--output-dir", "`--output-dir`", Staged, &["artifacts", "fetch", "--output-dir", "out"], Runs),
    case(
        FETCH,
        "--amdgpu-families",
        "`--amdgpu-families`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--amdgpu-families", "gfx94X-dcgpu"],
        Runs,
    ),
    case(
        FETCH,
        "--amdgpu-targets",
        "`--amdgpu-targets`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--amdgpu-targets", "gfx942"],
        Runs,
    ),
    case(
        FETCH,
        "--generic-only",
        "`--generic-only`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--generic-only"],
        Runs,
    ),
    case(
        FETCH,
        "--expand-family-to-targets",
        "`--expand-family-to-targets`",
        Staged,
        &[
            "artifacts",
            "fetch",
            "--output-dir",
            "out",
            "--amdgpu-families",
            "gfx94X-dcgpu",
            "--expand-family-to-targets",
        ],
        Runs,
    ),
    case(
        FETCH,
        "--bootstrap",
        "`--bootstrap`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--bootstrap"],
        Runs,
    ),
    case(FETCH, "--flatten", "`--flatten`", Staged, &["artifacts", "fetch", "--output-dir", "out", "--flatten"], Runs),
    case(
        FETCH,
        "--no-extract",
        "`--no-extract`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--no-extract"],
        Runs,
    ),
    case(
        FETCH,
        "--download-cache-dir",
        "`--download-cache-dir`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--download-cache-dir", "cache"],
        Runs,
    ),
    case(
        FETCH,
        "--download-concurrency",
        "`--download-concurrency`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--download-concurrency", "2"],
        Runs,
    ),
    case(
        FETCH,
        "--extract-concurrency",
        "`--extract-concurrency`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--extract-concurrency", "2"],
        Runs,
    ),
    case(
        FETCH,
        "--exclude-components",
        "`--exclude-components`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--exclude-components", "dev,doc"],
        Runs,
    ),
    case(
        FETCH,
        "--exclude-artifacts",
        "`--exclude-artifacts`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--exclude-artifacts", "blas"],
        Runs,
    ),
    // artifact_manager.py push → quarry artifacts push
    case(
        PUSH,
        "--stage",
        "`quarry artifacts push --stage`",
        Build,
        &["artifacts", "push", "--stage", "compiler", "--build-dir", "build"],
        Runs,
    ),
    case(
        PUSH,
        "--build-dir",
        "`--build-dir`",
        Build,
        &["artifacts", "push", "--stage", "all", "--build-dir", "build"],
        Runs,
    ),
    case(
        PUSH,
        "--compression-type",
        "`--compression-type`",
        Build,
        &["artifacts", "push", "--stage", "all", "--build-dir", "build", "--compression-type", "xz"],
        Runs,
    ),
    case(
        PUSH,
        "--compression-level",
        "`--compression-level`",
        Build,
        &["artifacts", "push", "--stage", "all", "--build-dir", "build", "--compression-level", "5"],
        Runs,
    ),
    case(
        PUSH,
        "--compress-concurrency",
        "`--compress-concurrency`",
        Build,
        &["artifacts", "push", "--stage", "all", "--build-dir", "build", "--compress-concurrency", "2"],
        Runs,
    ),
    case(
        PUSH,
        "--upload-concurrency",
        "`--upload-concurrency`",
        Build,
        &["artifacts", "push", "--stage", "all", "--build-dir", "build", "--upload-concurrency", "2"],
        Runs,
    ),
    // artifact_manager.py copy → quarry artifacts copy
    case(
        COPY,
        "--source-run-id",
        "`quarry artifacts copy --source-run-id`",
        Staged,
        &["artifacts", "copy", "--source-run-id", "1", "--run-id", "2", "--stage", "foundation"],
        Runs,
    ),
    case(
        COPY,
        "--source-repository",
        "`--source-repository`",
        Staged,
        &[
            "artifacts",
            "copy",
            "--source-run-id",
            "1",
            "--run-id",
            "2",
            "--stage",
            "foundation",
            "--source-repository",
            "ROCm/TheRock",
        ],
        Runs,
    ),
    case(
        COPY,
        "--stage",
        "`--stage`",
        Staged,
        &["artifacts", "copy", "--source-run-id", "1", "--run-id", "2", "--stage", "foundation,compiler"],
        Runs,
    ),
    case(
        COPY,
        "--concurrency",
        "`--concurrency`",
        Staged,
        &["artifacts", "copy", "--source-run-id", "1", "--run-id", "2", "--stage", "foundation", "--concurrency", "2"],
        Runs,
    ),
    case(
        COPY,
        "--dry-run",
        "`--dry-run`",
        Staged,
        &["artifacts", "copy", "--source-run-id", "1", "--run-id", "2", "--stage", "foundation", "--dry-run"],
        Runs,
    ),
    // artifact_manager.py info and list-stages
    case(
        INFO,
        "--stage",
        "`quarry artifacts info --stage`",
        Topology,
        &["artifacts", "info", "--stage", "math-libs"],
        Prints { needles: &["produces: blas", "fetches: amd-llvm sysdeps"], on_stderr: false },
    ),
    case(
        INFO,
        "--amdgpu-families",
        "`--amdgpu-families` (adds the target families a fetch matches)",
        Topology,
        &["artifacts", "info", "--stage", "math-libs", "--amdgpu-families", "gfx94X-dcgpu"],
        Prints { needles: &["produces: blas", "target families: generic, gfx94X-dcgpu"], on_stderr: false },
    ),
    case(
        LIST,
        "list-stages",
        "`quarry artifacts list-stages` (`quarry stage list`: one line a stage)",
        Topology,
        &["artifacts", "list-stages"],
        Prints { needles: &["Build stages:", "  math-libs (per-arch)", "    Produces: 1 artifacts"], on_stderr: false },
    ),
    // fetch_artifacts.py → quarry artifacts fetch
    case(
        LEGACY,
        "INCLUDE (regexes)",
        "`quarry artifacts fetch INCLUDE…` (the same regexes)",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--amdgpu-targets", "gfx942", "blas_"],
        Same {
            quarry: &[
                "artifacts",
                "fetch",
                "--output-dir",
                "out",
                "--amdgpu-targets",
                "gfx942",
                "--exclude-artifacts",
                "sysdeps,amd-llvm",
            ],
            compare: "out",
            stdout: false,
        },
    ),
    case(
        LEGACY,
        "--exclude",
        "`--exclude REGEX…` (by name: `--exclude-artifacts`, `--exclude-components`)",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--exclude", "^sysdeps_", "amd-llvm"],
        Same {
            quarry: &["artifacts", "fetch", "--output-dir", "out", "--exclude-artifacts", "sysdeps,amd-llvm"],
            compare: "out",
            stdout: false,
        },
    ),
    case(
        LEGACY,
        "--artifact-group",
        "`--amdgpu-families`",
        Staged,
        &[
            "artifacts",
            "fetch",
            "--output-dir",
            "out",
            "--artifact-group",
            "gfx94X-dcgpu",
            "--expand-family-to-targets",
        ],
        Same {
            quarry: &[
                "artifacts",
                "fetch",
                "--output-dir",
                "out",
                "--amdgpu-families",
                "gfx94X-dcgpu",
                "--expand-family-to-targets",
            ],
            compare: "out",
            stdout: true,
        },
    ),
    case(
        LEGACY,
        "--amdgpu-targets",
        "`--amdgpu-targets`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--amdgpu-targets", "gfx1100"],
        Runs,
    ),
    case(
        LEGACY,
        "--platform",
        "`--platform`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--platform", "linux"],
        Runs,
    ),
    case(
        LEGACY,
        "--run-id",
        "`--run-id`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--run-id", "1"],
        Runs,
    ),
    case(
        LEGACY,
        "--run-github-repo",
        "`--run-github-repo`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--run-github-repo", "ROCm/TheRock"],
        Runs,
    ),
    case(
        LEGACY,
        "--output-dir",
        "`--output-dir` (archives unpack into `<output-dir>/artifacts/<name>/`)",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out"],
        Runs,
    ),
    case(
        LEGACY,
        "--download-concurrency",
        "`--download-concurrency`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--download-concurrency", "3"],
        Runs,
    ),
    case(
        LEGACY,
        "--extract-concurrency",
        "`--extract-concurrency`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--extract-concurrency", "3"],
        Runs,
    ),
    case(
        LEGACY,
        "--extract",
        "the default",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--extract"],
        Same { quarry: &["artifacts", "fetch", "--output-dir", "out"], compare: "out", stdout: true },
    ),
    case(LEGACY, "--flatten", "`--flatten`", Staged, &["artifacts", "fetch", "--output-dir", "out", "--flatten"], Runs),
    case(
        LEGACY,
        "--no-extract",
        "`--no-extract`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--no-extract"],
        Runs,
    ),
    case(
        LEGACY,
        "--delete-after-extract",
        "the default",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--delete-after-extract"],
        Same { quarry: &["artifacts", "fetch", "--output-dir", "out"], compare: "out", stdout: true },
    ),
    case(
        LEGACY,
        "--no-delete-after-extract",
        "`--download-cache-dir OUTPUT_DIR`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--no-delete-after-extract"],
        Same {
            quarry: &["artifacts", "fetch", "--output-dir", "out", "--download-cache-dir", "out"],
            compare: "out",
            stdout: true,
        },
    ),
    case(
        LEGACY,
        "--dry-run",
        "refused: `quarry artifacts info --stage STAGE`",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--dry-run"],
        Refused { names: "quarry artifacts info --stage STAGE" },
    ),
    case(
        LEGACY,
        "--no-dry-run",
        "the default",
        Staged,
        &["artifacts", "fetch", "--output-dir", "out", "--no-dry-run"],
        Same { quarry: &["artifacts", "fetch", "--output-dir", "out"], compare: "out", stdout: true },
    ),
    // build_package.py → quarry package deb|rpm
    case(
        BUILD,
        "--pkg-type",
        "`quarry package deb|rpm` (`--pkg-type` also taken, any case)",
        Artifacts,
        &[
            "package",
            "--pkg-type",
            "DEB",
            "--artifacts-dir",
            "artifacts",
            "--dest-dir",
            "out",
            "--rocm-version",
            "7.1.0",
            "--pkg-names",
            "amdrocm-fft",
        ],
        Same { quarry: package!(), compare: "out", stdout: false },
    ),
    case(
        BUILD,
        "--enable-multi-arch",
        "`--enable-kpack`",
        Artifacts,
        package!("--enable-multi-arch"),
        Same { quarry: package!("--enable-kpack"), compare: "out", stdout: false },
    ),
    case(BUILD, "--enable-kpack", "`--enable-kpack`", Artifacts, package!("--enable-kpack"), Runs),
    case(BUILD, "--artifacts-dir", "`--artifacts-dir`", Artifacts, package!(), Runs),
    case(BUILD, "--dest-dir", "`--dest-dir`", Artifacts, package!(), Runs),
    case(BUILD, "--rocm-version", "`--rocm-version`", Artifacts, package!(), Runs),
    case(BUILD, "--target", "`--target`", Artifacts, package!("--target", "gfx942"), Runs),
    case(BUILD, "--version-suffix", "`--version-suffix`", Artifacts, package!("--version-suffix", "123"), Runs),
    case(
        BUILD,
        "--install-prefix",
        "`--install-prefix`",
        Artifacts,
        package!("--install-prefix", "/opt/rocm/core"),
        Runs,
    ),
    case(
        BUILD,
        "--build-variant",
        "`--build-variant` (`release`: the default packages)",
        Artifacts,
        package!("--build-variant", "release"),
        Same { quarry: package!(), compare: "out", stdout: false },
    ),
    case(BUILD, "--runpath-pkg", "`--runpath-pkg`", Artifacts, package!("--runpath-pkg"), Runs),
    case(BUILD, "--clean-build", "`--clean-build`", Artifacts, package!("--clean-build"), Runs),
    case(BUILD, "--pkg-names", "`--pkg-names`", Artifacts, package!(), Runs),
    case(BUILD, "--verbose", "`--verbose`", Artifacts, package!("--verbose"), Runs),
    // upload_python_packages.py → quarry upload
    case(
        PYTHON,
        "--input-packages-dir",
        "`quarry upload DIR`",
        Packages,
        &["upload", "--input-packages-dir", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Same {
            quarry: &["upload", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
            compare: "",
            stdout: true,
        },
    ),
    case(
        PYTHON,
        "--artifact-group",
        "`--artifact-group`",
        Packages,
        &["upload", "packages", "--artifact-group", "gfx94X-dcgpu", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Runs,
    ),
    case(
        PYTHON,
        "--run-id",
        "`--run-id`",
        Packages,
        &["upload", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Runs,
    ),
    case(
        PYTHON,
        "--bucket",
        "`--bucket`",
        Packages,
        &["upload", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Runs,
    ),
    case(
        PYTHON,
        "--dry-run",
        "`--dry-run`",
        Packages,
        &["upload", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Runs,
    ),
    case(
        PYTHON,
        "--multiarch",
        "no `--artifact-group`",
        Packages,
        &[
            "upload",
            "--input-packages-dir",
            "packages",
            "--artifact-group",
            "gfx94X-dcgpu",
            "--multiarch",
            "--run-id",
            "5",
            "--bucket",
            "b",
            "--dry-run",
        ],
        Same {
            quarry: &["upload", "packages", "--run-id", "5", "--bucket", "b", "--dry-run"],
            compare: "",
            stdout: true,
        },
    ),
    case(
        PYTHON,
        "--output-dir",
        "`--to DIR/{run}-{platform}/python/`",
        Packages,
        &[
            "upload",
            "--input-packages-dir",
            "packages",
            "--run-id",
            "5",
            "--platform",
            "linux",
            "--output-dir",
            "store",
        ],
        Same {
            quarry: &["upload", "packages", "--to", "store/5-linux/python/"],
            compare: "store/5-linux/python",
            stdout: false,
        },
    ),
    // upload_package_repo.py → quarry upload
    case(
        REPO,
        "--pkg-type",
        "`--kind deb|rpm`",
        Packages,
        &["upload", "debs", "--pkg-type", "deb", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Same {
            quarry: &["upload", "debs", "--kind", "deb", "--run-id", "5", "--bucket", "b", "--dry-run"],
            compare: "",
            stdout: true,
        },
    ),
    case(
        REPO,
        "--run-id",
        "`--run-id`",
        Packages,
        &["upload", "debs", "--kind", "deb", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Runs,
    ),
    case(
        REPO,
        "--package-dir",
        "`quarry upload DIR`",
        Packages,
        &["upload", "--package-dir", "debs", "--pkg-type", "deb", "--run-id", "5", "--bucket", "b", "--dry-run"],
        Same {
            quarry: &["upload", "debs", "--kind", "deb", "--run-id", "5", "--bucket", "b", "--dry-run"],
            compare: "",
            stdout: true,
        },
    ),
];

/// Three stages: foundation (sysdeps) → compiler (amd-llvm) → math-libs (blas, per arch).
const TOPOLOGY: &str = r#"
[metadata]
version = "2.0"

[build_stages.foundation]
description = "Third-party libraries"
artifact_groups = ["base"]

[build_stages.compiler]
description = "The compiler"
artifact_groups = ["compiler"]

[build_stages.math-libs]
description = "Math libraries per architecture"
artifact_groups = ["math"]
type = "per-arch"

[artifact_groups.base]

[artifact_groups.compiler]
artifact_group_deps = ["base"]

[artifact_groups.math]
type = "per-arch"
artifact_group_deps = ["compiler"]

[artifacts.sysdeps]
artifact_group = "base"

[artifacts.amd-llvm]
artifact_group = "compiler"
artifact_deps = ["sysdeps"]

[artifacts.blas]
artifact_group = "math"
type = "target-specific"
artifact_deps = ["amd-llvm"]
"#;

/// `quarry ARGS` in `dir` with a clean CI environment: the run (1, linux) in `staging/`.
async fn quarry(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    let github = dir.with_extension("github");
    std::fs::create_dir_all(&github).unwrap();
    cmd.args(args)
        .current_dir(dir)
        .env("GITHUB_OUTPUT", github.join("output"))
        .env("GITHUB_STEP_SUMMARY", github.join("summary"))
        .env("GITHUB_REPOSITORY", "ROCm/TheRock")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("THEROCK_LOCAL_STAGING_DIR", "staging")
        .env("THEROCK_RUN_ID", "1")
        .env("THEROCK_PLATFORM", "linux")
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_RUN_ID")
        .env_remove("RELEASE_TYPE")
        .env_remove("QUARRY_STORE")
        .env_remove("QUARRY_TOKEN")
        .env_remove("RUST_LOG");
    run(cmd, Duration::from_secs(120)).await
}

/// A fresh directory under `root` holding what `setup` says.
async fn prepare(root: &Path, name: &str, setup: Setup) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    if matches!(setup, Topology | Build | Staged) {
        std::fs::write(dir.join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    }
    if matches!(setup, Build | Staged) {
        let artifacts = dir.join("build/artifacts");
        let zlib = [("lib/libz.so.1.3", "zlib"), ("lib/libz.so.1", "->libz.so.1.3")];
        artifact(&artifacts, "sysdeps_lib_generic", "third-party/sysdeps/stage", &zlib);
        artifact(&artifacts, "sysdeps_dev_generic", "third-party/sysdeps/stage", &[("include/zlib.h", "/* zlib */")]);
        artifact(&artifacts, "amd-llvm_lib_generic", "compiler/amd-llvm/stage", &[("lib/llvm/bin/clang", "clang")]);
        for gfx in ["gfx942", "gfx1100"] {
            let file = format!("lib/rocblas/library/{gfx}.co");
            artifact(&artifacts, &format!("blas_lib_{gfx}"), "math-libs/BLAS/stage", &[(file.as_str(), gfx)]);
        }
    }
    if setup == Staged {
        let out = quarry(&dir, &["artifacts", "push", "--stage", "all", "--build-dir", "build"]).await;
        assert_success(&out, "staging run 1");
    }
    if setup == Packages {
        let dist = dir.join("packages/dist");
        std::fs::create_dir_all(&dist).unwrap();
        WheelSpec::new("rocm-sdk-core", "7.1.0").write_to(&dist);
        std::fs::write(dist.join("rocm-7.1.0.tar.gz"), b"sdist").unwrap();
        std::fs::create_dir_all(dir.join("debs/logs")).unwrap();
        std::fs::write(dir.join("debs/amdrocm-fft7.1_7.1.0-5_amd64.deb"), b"deb").unwrap();
    }
    if setup == Version {
        std::fs::write(dir.join("version.json"), r#"{"rocm-version": "7.1.0"}"#).unwrap();
    }
    if setup == Artifacts {
        let artifacts = dir.join("artifacts");
        let fft = [
            ("lib/librocfft.so.0.1", "rocfft host code"),
            ("lib/librocfft.so.0", "->librocfft.so.0.1"),
            ("lib/librocfft.so", "->librocfft.so.0"),
            ("lib/rocfft/gfx942.kpack", "gfx942 kernels"),
        ];
        artifact(&artifacts, "fft_lib_gfx942", "math-libs/rocFFT/stage", &fft);
        artifact(&artifacts, "core-hip_lib_generic", "core/clr/stage", &[("lib/libamdhip64.so.7", "runtime")]);
        artifact(
            &artifacts,
            "sysdeps_lib_generic",
            "third-party/sysdeps/stage",
            &[("lib/rocm_sysdeps/libz.so.1", "z")],
        );
    }
    dir
}

/// An index page or index state object (what an upload into a local store indexes).
fn generated(rel: &str) -> bool {
    let name = rel.rsplit(['/', '\\']).next().unwrap_or(rel);
    rel.contains(".quarry-index") || name == "index.html" || name == "index.json"
}

/// Every file below `dir` with its bytes' digest (links as their targets; a generated page or
/// index state only as present: they hold upload times), logs (they hold times) and a store's
/// own bookkeeping (`.quarry/`) left out.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, format!("-> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                if path.file_name().is_some_and(|n| n != "logs" && n != ".quarry") {
                    out.insert(format!("{rel}/"), String::new());
                    walk(base, &path, out);
                }
            } else if generated(&rel) {
                // Pages and index state carry upload times: the same pages must exist.
                out.insert(rel, "(generated)".into());
            } else {
                out.insert(rel, sha256_hex(&std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every row, each with its own directories; the failures, each naming its row, all at once.
#[tokio::test(flavor = "multi_thread")]
async fn every_therock_spelling_runs_with_its_meaning_or_names_quarrys() {
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, c) in CASES.iter().enumerate() {
        let row = format!("{} {} (quarry {})", c.script, c.flag, c.args.join(" "));
        let dir = prepare(tmp.path(), &format!("{i}-therock"), c.setup).await;
        let out = quarry(&dir, c.args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("unexpected argument") || stderr.contains("unrecognized subcommand") {
            failures.push(format!("{row}: clap refused it\n{}", text(&out)));
            continue;
        }
        match c.check {
            Runs if !out.status.success() => failures.push(format!("{row}: failed\n{}", text(&out))),
            Runs => {}
            Prints { needles, on_stderr } => {
                let shown = String::from_utf8_lossy(if on_stderr { &out.stderr } else { &out.stdout });
                if !out.status.success() || needles.iter().any(|n| !shown.contains(n)) {
                    failures.push(format!("{row}: expected {needles:?}\n{}", text(&out)));
                }
            }
            Refused { names } => {
                if out.status.code() != Some(2) || !stderr.contains(names) {
                    failures.push(format!("{row}: expected exit 2 naming {names:?}\n{}", text(&out)));
                }
            }
            Same { quarry: own, compare, stdout } => {
                let twin = prepare(tmp.path(), &format!("{i}-quarry"), c.setup).await;
                let theirs = quarry(&twin, own).await;
                if !out.status.success() || !theirs.status.success() {
                    failures.push(format!(
                        "{row}: failed\n{}\n=== quarry {}\n{}",
                        text(&out),
                        own.join(" "),
                        text(&theirs)
                    ));
                    continue;
                }
                let (a, b) = (tree(&dir.join(compare)), tree(&twin.join(compare)));
                if a.is_empty() || a != b {
                    failures.push(format!("{row}: left {a:#?}\nquarry {} left {b:#?}", own.join(" ")));
                }
                if stdout && out.stdout != theirs.stdout {
                    failures.push(format!(
                        "{row}: printed\n{}\n=== quarry {}\n{}",
                        text(&out),
                        own.join(" "),
                        text(&theirs)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} rows failed:\n\n{}", failures.len(), CASES.len(), failures.join("\n\n"));
}

/// The rows of `docs/therock.md`'s "Flag by flag" table: (script, flag, Quarry spelling).
fn guide_rows() -> Vec<(String, String, String)> {
    let guide = std::fs::read_to_string(workspace_root().join("docs/therock.md")).unwrap();
    let section = guide.split("\n## Flag by flag\n").nth(1).expect("docs/therock.md has a \"Flag by flag\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let unquote = |cell: &str| cell.trim().trim_matches('`').replace("\\|", "|");
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Script") && !l.starts_with("|--"))
        .map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "three cells in {l}");
            (unquote(cells[0]), unquote(cells[1]), cells[2].trim().replace("\\|", "|"))
        })
        .collect()
}

/// The guide's table and [`CASES`] are the same rows in the same order: every row the guide
/// shows is run above, and every row run is shown (the expected table is printed on failure).
#[test]
fn the_guides_table_is_the_table_the_test_runs() {
    let expected: Vec<(String, String, String)> =
        CASES.iter().map(|c| (c.script.to_owned(), c.flag.to_owned(), c.quarry.to_owned())).collect();
    let table: String = CASES
        .iter()
        .map(|c| format!("| `{}` | `{}` | {} |\n", c.script, c.flag, c.quarry.replace('|', "\\|")))
        .collect();
    assert_eq!(guide_rows(), expected, "docs/therock.md's \"Flag by flag\" table should be:\n{table}");
}

/// Each TheRock-only spelling stays out of the short help (`-h`), so Quarry's own spelling is
/// what a user sees first.
#[tokio::test(flavor = "multi_thread")]
async fn therock_spellings_stay_out_of_the_short_help() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, hidden) in [
        (
            &["artifacts", "fetch", "-h"][..],
            &["--artifact-group", "--exclude", "--extract", "--delete-after-extract", "--dry-run"][..],
        ),
        (&["artifacts", "info", "-h"], &["--amdgpu-families"]),
        (&["artifacts", "-h"], &["list-stages"]),
        (&["stage", "configure", "-h"], &["--list-stages", "--projects"]),
        (&["package", "-h"], &["--pkg-type", "--enable-multi-arch"]),
        (&["upload", "-h"], &["--input-packages-dir", "--package-dir", "--pkg-type", "--multiarch", "--output-dir"]),
    ] {
        let out = quarry(tmp.path(), args).await;
        assert_success(&out, &args.join(" "));
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in hidden {
            let shown = help.lines().any(|l| l.split_whitespace().next() == Some(flag.trim()));
            assert!(!shown, "quarry {} shows {flag}:\n{help}", args.join(" "));
        }
    }
}

/// Bad input in TheRock's spellings is refused (exit 2) naming it, before anything is written:
/// an include pattern that is no regular expression, a `--pkg-type` that disagrees with the
/// package kind given.
#[tokio::test(flavor = "multi_thread")]
async fn bad_values_in_therock_spellings_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = prepare(tmp.path(), "regex", Staged).await;
    let out = quarry(&dir, &["artifacts", "fetch", "--output-dir", "out", "blas_("]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"blas_(\" is not a regular expression"), "{}", text(&out));
    assert!(!dir.join("out").exists(), "nothing written");

    let dir = prepare(tmp.path(), "kinds", Artifacts).await;
    let out = quarry(&dir, package!("--pkg-type", "rpm")).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`quarry package deb` and --pkg-type rpm disagree"),
        "{}",
        text(&out)
    );
    assert!(!dir.join("out").exists(), "nothing written");
}
