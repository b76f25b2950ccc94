//! Replays the fuzz inputs through the same property checks the fuzz targets run
//! (`fuzz/checks.rs`), on the stable toolchain: the committed seeds (`fuzz/seeds/<target>/`, a
//! minimized set that covers what the fuzzer reached, and every crash it found, so a crash found
//! once stays fixed) always, and the local corpus `make fuzz` grows (`fuzz/corpus/<target>/`,
//! git-ignored) when there is one. This runs in seconds under `make unit`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn replay(target: &str, check: checks::Check, files: Vec<PathBuf>) -> usize {
    let mut replayed = 0;
    for file in files {
        // A fuzzer running meanwhile may replace inputs: a vanished file is not a failure.
        let Ok(data) = std::fs::read(&file) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} breaks a property",
            file.display()
        );
        replayed += 1;
    }
    replayed
}

#[test]
fn every_seed_keeps_its_properties() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let mut total = 0;
    for (target, check) in checks::TARGETS {
        let files = inputs(&root.join(target));
        assert!(!files.is_empty(), "fuzz/seeds/{target} is empty");
        total += replay(target, *check, files);
    }
    eprintln!("replayed {total} fuzz seeds");
}

#[test]
fn the_local_corpus_keeps_its_properties() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    for (target, check) in checks::TARGETS {
        total += replay(target, *check, inputs(&root.join(target)));
    }
    eprintln!("replayed {total} inputs of the local fuzz corpus (fuzz/corpus, from make fuzz)");
}

#[test]
fn every_target_is_built_and_checked() {
    let manifest =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml"))
            .unwrap();
    let built: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|name| *name != "graphql-cache-fuzz")
        .collect();
    let mut checked: Vec<&str> = checks::TARGETS.iter().map(|(t, _)| *t).collect();
    let mut built_sorted = built.clone();
    built_sorted.sort_unstable();
    checked.sort_unstable();
    assert_eq!(
        built_sorted, checked,
        "fuzz/Cargo.toml's targets and checks::TARGETS differ"
    );
}
