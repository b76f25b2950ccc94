//! The admin endpoints (purge, explain) as the exchange drives them: refused at the headers, or
//! their body read whole and answered here; never upstream.

use super::*;

impl Exchange {
    /// A request to the purge API: refused here, or held for its selectors.
    pub(super) fn admin_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        admin: (Admin, &PurgeApi),
        end_of_stream: bool,
    ) -> Flow {
        self.state = State::Served;
        if purge::at_headers(admin, cx.host(), end_of_stream) == AtHeaders::Answered {
            return Flow::Pause;
        }
        self.state = State::Admin(admin.0);
        let context = self.context;
        let watching = cx.worker(|w| {
            w.held_purges.insert(context);
            w.watchdog.watching()
        });
        if watching {
            let now_ms = cx.host().now_ms();
            cx.worker(|w| w.watchdog.hold(context, now_ms));
        }
        Flow::Pause
    }

    pub(super) fn admin_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        call: Admin,
        size: usize,
        end: bool,
    ) -> Flow {
        if size > cx.config().max_body_bytes {
            self.state = State::Served;
            purge::refuse(cx.host(), &too_large());
            return Flow::Pause;
        }
        if !end {
            return Flow::Pause;
        }
        self.state = State::Served;
        let context = self.context;
        cx.worker(|w| w.held_purges.remove(&context));
        let body = cx.host().request_body(size).unwrap_or_default();
        match call {
            Admin::Purge => purge::with_body(cx, context, &body),
            Admin::Explain => explain(cx, &body),
            Admin::WhatIf => what_if(cx, &body),
        }
        Flow::Pause
    }
}

pub(super) fn too_large() -> Refusal {
    Refusal {
        status: 413,
        message: "the purge body is larger than max_body_bytes".into(),
    }
}

pub(super) fn trailers_refused() -> Refusal {
    Refusal {
        status: 400,
        message: "a purge body must not end in trailers".into(),
    }
}
