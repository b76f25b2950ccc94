//! Why a request was passed through to the origin untouched.

/// Every reason the filter lets a request through without caching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    // Requests that are well-formed but not ours to cache.
    Method,
    ContentType,
    RequestEncoding,
    Mutation,
    Subscription,
    /// The route's metadata turns caching off.
    RouteDisabled,
    /// A rule says this operation is never cached.
    NotCachedByRule,
    /// The operation is private and the request carries no identity.
    NoIdentity,
    /// Envoy does not deliver bodies of held requests (`allow_on_headers_stop_iteration` off).
    BodyNotDelivered,
    /// A GET with a body, which the key (from the query string) cannot account for.
    GetWithBody,
    /// A string form the GraphQL parser would decode wrongly (multi-line block string, `\b`).
    UnsupportedString,
    /// A persisted query's hash the filter has not been taught: the origin answers it.
    PersistedQueryUnknown,
    // Input that is broken or beyond configured limits: these also count as rejected inputs.
    BodyTooLarge,
    EmptyBody,
    MalformedJson,
    /// A JSON object names a member twice: which one the origin reads is its business.
    DuplicateMember,
    Batched,
    NotAnObject,
    MissingQuery,
    BadOperationName,
    BadVariables,
    BadExtensions,
    BadQueryString,
    TooDeep,
    TooWide,
    InvalidGraphql,
    UnknownOperation,
    UnknownFragment,
}

impl Bypass {
    /// The reason as shown in the debug header.
    pub fn as_str(self) -> &'static str {
        match self {
            Bypass::Method => "method",
            Bypass::ContentType => "content-type",
            Bypass::RequestEncoding => "request-content-encoding",
            Bypass::Mutation => "mutation",
            Bypass::Subscription => "subscription",
            Bypass::RouteDisabled => "route-disabled",
            Bypass::NotCachedByRule => "rule-no-cache",
            Bypass::NoIdentity => "no-identity",
            Bypass::BodyNotDelivered => "body-not-delivered",
            Bypass::UnsupportedString => "unsupported-string",
            Bypass::PersistedQueryUnknown => "persisted-query-unknown",
            Bypass::GetWithBody => "get-with-body",
            Bypass::BodyTooLarge => "body-too-large",
            Bypass::EmptyBody => "empty-body",
            Bypass::MalformedJson => "malformed-json",
            Bypass::DuplicateMember => "duplicate-member",
            Bypass::Batched => "batched",
            Bypass::NotAnObject => "not-an-object",
            Bypass::MissingQuery => "missing-query",
            Bypass::BadOperationName => "bad-operation-name",
            Bypass::BadVariables => "bad-variables",
            Bypass::BadExtensions => "bad-extensions",
            Bypass::BadQueryString => "bad-query-string",
            Bypass::TooDeep => "too-deep",
            Bypass::TooWide => "too-wide",
            Bypass::InvalidGraphql => "invalid-graphql",
            Bypass::UnknownOperation => "unknown-operation",
            Bypass::UnknownFragment => "unknown-fragment",
        }
    }

    /// Whether this bypass was caused by input the filter could not make sense of (as opposed to a
    /// valid request that is simply not cacheable). Counted separately as `rejected_inputs`.
    pub fn is_rejected_input(self) -> bool {
        !matches!(
            self,
            Bypass::Method
                | Bypass::ContentType
                | Bypass::RequestEncoding
                | Bypass::Mutation
                | Bypass::Subscription
                | Bypass::RouteDisabled
                | Bypass::NotCachedByRule
                | Bypass::NoIdentity
                | Bypass::BodyNotDelivered
                | Bypass::UnsupportedString
                | Bypass::PersistedQueryUnknown
                | Bypass::GetWithBody
        )
    }
}
