//! Replays every kept fuzz input (`fuzz/corpus/<target>/`) through the same property checks the
//! fuzz targets run (`fuzz/checks.rs`), on the stable toolchain: a crash found once stays fixed.
//! `make fuzz` grows the corpus; this runs in seconds under `make unit`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_corpus_input_keeps_its_properties() {
    let mut total = 0;
    for (target, check) in checks::TARGETS {
        let files = corpus(target);
        assert!(!files.is_empty(), "fuzz/corpus/{target} is empty");
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
            total += 1;
        }
    }
    eprintln!("replayed {total} fuzz inputs");
}
