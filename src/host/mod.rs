//! The proxy-wasm adapter: the only code that talks to Envoy. It translates SDK callbacks into
//! calls of `crate::worker` and implements `crate::effects` over host calls; it decides nothing.

mod envoy;
mod filter;
mod metrics;
mod root;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn proxy_wasm::traits::RootContext> {
        Box::new(root::CacheRoot::new())
    });
}}
