//! Test support: testkit's processes (a real origin, a real Envoy with the built `.wasm`, Redis,
//! the L2 service) and its HTTP/1.1 client, and a fleet of Envoys sharing one L2.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod federation;
mod fleet;

#[allow(unused_imports)] // each test binary uses its own part
pub use federation::*;
#[allow(unused_imports)]
pub use fleet::*;
#[allow(unused_imports)]
pub use testkit::l2::http_raw;
pub use testkit::*;

/// An origin and an Envoy with the cache configured by `config`.
pub fn stack(config: &str) -> (Origin, Envoy) {
    let origin = Origin::start();
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    (origin, envoy)
}
