//! The proxy-wasm adapter: the only code that talks to Envoy. Everything it decides, it asks the
//! pure modules; it moves bytes between them and the host.

mod filter;
mod metrics;
mod root;
mod shared;
mod worker;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn proxy_wasm::traits::RootContext> {
        Box::new(root::CacheRoot::new())
    });
}}
