//! Quarry's end-to-end suites with real clients against real servers on loopback, built as one
//! test binary. Each module is one suite (`cargo nextest run -p quarry-tests -E 'test(/^apt_dnf::/)'`).

mod apt_chroot;
mod apt_dnf;
mod artifacts;
mod bad_input;
mod browse;
mod ci_matrix;
mod cli;
mod deb_builder;
mod gc;
mod hostile_archives;
mod http;
mod infra_template;
mod lambda_emulator;
mod package_versions;
mod packager;
mod parsers;
mod pip_clients;
mod pipeline;
mod races;
mod replicas;
mod rpm_builder;
mod s3_events;
mod s3_faults;
mod s3_index;
mod s3_stores;
mod s3_upload;
mod server_limits;
mod squatting;
mod upload_resets;
mod versions;
mod wheels;
mod windows;
