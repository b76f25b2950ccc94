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
}

impl NotStored {
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
        }
    }
}
