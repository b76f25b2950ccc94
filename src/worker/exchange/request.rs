//! The request's way in: its headers read (an admin route, a GET keyed at once, a POST held for
//! its body), then its body, classified and routed to its kind's machine: `entity` for an
//! `_entities` batch in entity mode, `hit` for a keyed query, a bypass for the rest.

use super::*;

impl Exchange {
    pub fn on_request_headers<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        end_of_stream: bool,
    ) -> Flow {
        let config = cx.config();
        // Paths the filter does not handle cost one header read, nothing more. When it handles
        // every path, all headers are read at once (one host call less for every request).
        if !config.paths.is_empty() {
            let path = cx.host().request_header(":path").unwrap_or_default();
            if let Some(admin) = admin_api(config, &path) {
                return self.admin_headers(cx, admin, end_of_stream);
            }
            if !handles(config, &path) {
                return Flow::Continue;
            }
        }
        let mut head = read_head(config, cx.host());
        if config.paths.is_empty() {
            if let Some(admin) = admin_api(config, &head.path) {
                return self.admin_headers(cx, admin, end_of_stream);
            }
        }
        if head.method == b"GET" && handles(config, &head.path) {
            // A GET with a body: the key could not account for the body the origin may read.
            if !end_of_stream {
                return self.bypass(cx, Bypass::GetWithBody);
            }
            read_route(config, cx.host(), &mut head);
            let apq = &cx.plugin().apq;
            let decided = hit::decide(cx, &head, b"", |host, operations| {
                let full = std::str::from_utf8(&head.path).map_err(|_| Bypass::BadQueryString)?;
                let (path, query) = split_path(full);
                let known = Known {
                    persisted: &|h| apq.lookup(host, h),
                    operations: Some(operations),
                };
                classify_get(config, &head, path, query, known)
            });
            return self.lookup_scoped(cx, decided, &head, None);
        }
        match classify_headers(config, &head, end_of_stream) {
            HeadersVerdict::NotHandled => Flow::Continue,
            HeadersVerdict::Bypass(reason) => self.bypass(cx, reason),
            HeadersVerdict::Ready(classified) => {
                self.lookup_scoped(cx, Ok(classified.into()), &head, None)
            }
            HeadersVerdict::NeedBody => {
                if !cx.worker(|w| w.watchdog.may_hold()) {
                    return self.bypass(cx, Bypass::BodyNotDelivered);
                }
                // Held with `allow_on_headers_stop_iteration`: nothing goes upstream until the
                // body has been read and the request is known to be a miss.
                read_route(config, cx.host(), &mut head);
                self.state = State::AwaitingBody(Box::new(head));
                // The clock is read only while the watchdog still watches (a host call).
                if cx.worker(|w| w.watchdog.watching()) {
                    let now_ms = cx.host().now_ms();
                    let context = self.context;
                    cx.worker(|w| w.watchdog.hold(context, now_ms));
                }
                Flow::Pause
            }
        }
    }

    pub fn on_request_body<H: RequestHost>(
        &mut self,
        cx: &mut Ctx<'_, H>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        match self.state {
            State::AwaitingBody(_) | State::Admin(_) => {
                // Let go by the watchdog: the request is upstream already, whatever comes now.
                let context = self.context;
                let (released, watching) =
                    cx.worker(|w| (w.flights.outcome(context).is_some(), w.watchdog.watching()));
                if watching {
                    let now_ms = cx.host().now_ms();
                    let arrival = cx.worker(|w| w.watchdog.body_arrived(context, now_ms, released));
                    if let BodyArrival::AlreadyReleased { concluded: true } = arrival {
                        cx.host().log(LogLevel::Error, OPTION_OFF_LOG);
                    }
                }
                if released {
                    return self.bypass(cx, Bypass::BodyNotDelivered);
                }
            }
            // Decided at the headers (a GET with a body): it stays held until answered or released.
            State::Keyed(Keyed::Waiting { .. }) | State::Served => return Flow::Pause,
            _ => return Flow::Continue,
        }
        if let State::Admin(call) = self.state {
            return self.admin_body(cx, call, body_size, end_of_stream);
        }
        if body_size > cx.config().max_body_bytes {
            return self.bypass(cx, Bypass::BodyTooLarge);
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let State::AwaitingBody(head) = std::mem::replace(&mut self.state, State::Ignored) else {
            return Flow::Continue;
        };
        let body = cx.host().request_body(body_size).unwrap_or_default();
        self.trigger = trigger::trigger(cx.config(), &head);
        let config = cx.config();
        if entity_mode(config, &head.route) {
            let read = EntitiesRequest::read_with(&body, |query, name| {
                cx.worker(|w| w.entity_shapes.shape(query, name, config.limits()))
            });
            if let Ok(req) = read {
                return self.entities(cx, &head, req, &body);
            }
        }
        let apq = &cx.plugin().apq;
        let decided = hit::decide(cx, &head, &body, |host, operations| {
            let known = Known {
                persisted: &|h| apq.lookup(host, h),
                operations: Some(operations),
            };
            classify_post(config, &head, &body, known)
        });
        self.lookup_scoped(cx, decided, &head, Some(body))
    }

    pub fn on_request_trailers<H: RequestHost>(&mut self, cx: &mut Ctx<'_, H>) -> Flow {
        // A body that ends in trailers never showed end_of_stream: let it through uninspected.
        if matches!(self.state, State::AwaitingBody(_)) {
            return self.bypass(cx, Bypass::EmptyBody);
        }
        if matches!(self.state, State::Admin(_)) {
            // Never upstream: a purge request is answered here, whatever its shape.
            self.state = State::Served;
            purge::refuse(cx.host(), &admin::trailers_refused());
            return Flow::Pause;
        }
        Flow::Continue
    }
}
