//! Why an answer was not stored: shown in `x-cache-reason` with `debug_headers`.

/// Why a response was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    TtlZero,
    Status,
    SetCookie,
    NoStore,
    Private,
    NoCache,
    MaxAgeZero,
    ContentEncoding,
    ContentType,
    Vary,
    GraphqlErrors,
    NotJson,
    TooLarge,
    NonUtf8Header,
    /// Storable, but the store's admission kept what it holds instead.
    NotAdmitted,
    /// Shared data refused the write.
    StoreFailed,
    /// The shared fetch failed (reset, refused): nothing to store.
    FetchFailed,
    /// The answer had trailers, which an entry cannot replay.
    Trailers,
    /// An entity batch's answer none of whose entities could be stored.
    EntityNotStored,
}

impl NotStored {
    /// Every reason, in the order of [`NotStored::code`].
    pub const ALL: [NotStored; 19] = [
        NotStored::TtlZero,
        NotStored::Status,
        NotStored::SetCookie,
        NotStored::NoStore,
        NotStored::Private,
        NotStored::NoCache,
        NotStored::MaxAgeZero,
        NotStored::ContentEncoding,
        NotStored::ContentType,
        NotStored::Vary,
        NotStored::GraphqlErrors,
        NotStored::NotJson,
        NotStored::TooLarge,
        NotStored::NonUtf8Header,
        NotStored::NotAdmitted,
        NotStored::StoreFailed,
        NotStored::FetchFailed,
        NotStored::Trailers,
        NotStored::EntityNotStored,
    ];

    /// A number for the reason, stable within one build (see `cache::fates`).
    pub fn code(self) -> u8 {
        NotStored::ALL
            .iter()
            .position(|&w| w == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    pub fn from_code(code: u8) -> Option<NotStored> {
        NotStored::ALL.get(usize::from(code)).copied()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::TtlZero => "ttl-zero",
            NotStored::Status => "status",
            NotStored::SetCookie => "set-cookie",
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::NoCache => "no-cache",
            NotStored::MaxAgeZero => "max-age-zero",
            NotStored::ContentEncoding => "content-encoding",
            NotStored::ContentType => "content-type",
            NotStored::Vary => "vary",
            NotStored::GraphqlErrors => "graphql-errors",
            NotStored::NotJson => "not-json",
            NotStored::TooLarge => "too-large",
            NotStored::NonUtf8Header => "non-utf8-header",
            NotStored::NotAdmitted => "not-admitted",
            NotStored::StoreFailed => "store-failed",
            NotStored::FetchFailed => "fetch-failed",
            NotStored::Trailers => "trailers",
            NotStored::EntityNotStored => "entity-not-stored",
        }
    }
}
