//! The origin's GraphQL schema over a small in-memory data set.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use async_graphql::{
    Context, EmptySubscription, Enum, Error, InputObject, MaybeUndefined, Object, Result, Schema,
    ID,
};
use axum::http::HeaderMap;

use crate::auth::bearer_subject;

pub type OriginSchema = Schema<Query, Mutation, EmptySubscription>;

/// Largest string `big(size:)` returns.
pub const BIG_MAX: usize = 8 * 1024 * 1024;
/// Total `big` output allowed in one HTTP request (guards against aliasing
/// `big` thousands of times).
pub const BIG_BUDGET: usize = 64 * 1024 * 1024;
/// `User`/`Post` objects one HTTP request may resolve. `users { posts {
/// author { posts { ... } } } }` grows exponentially with depth; this keeps
/// such a query from exhausting memory while never limiting sane ones.
pub const OBJECT_BUDGET: usize = 50_000;
/// Longest sleep `slowField(ms:)` performs.
pub const SLOW_FIELD_MAX_MS: i32 = 10_000;

/// Request-scoped data handed to the resolvers.
#[derive(Clone)]
pub struct RequestMeta {
    /// The request headers.
    pub headers: HeaderMap,
    /// Value of the global request counter once this request was counted.
    pub seq: u64,
    /// Bytes handed out by `big` so far in this HTTP request.
    pub big_used: Arc<AtomicUsize>,
    /// `User`/`Post` objects resolved so far in this HTTP request.
    pub objects: Arc<AtomicUsize>,
}

impl RequestMeta {
    /// Whether this request ran past [`OBJECT_BUDGET`].
    pub fn over_object_budget(&self) -> bool {
        self.objects.load(Ordering::Relaxed) > OBJECT_BUDGET
    }

    pub fn new(headers: HeaderMap, seq: u64) -> Self {
        RequestMeta {
            headers,
            seq,
            big_used: Arc::new(AtomicUsize::new(0)),
            objects: Arc::new(AtomicUsize::new(0)),
        }
    }
}

#[derive(Clone, Debug)]
pub struct UserRow {
    pub id: String,
    pub name: String,
    pub email: String,
}

#[derive(Clone, Debug)]
pub struct PostRow {
    pub id: String,
    pub title: String,
    pub body: String,
    pub author_id: String,
}

/// In-memory data. Posts are kept in creation order (oldest first).
pub struct Db {
    users: RwLock<Vec<UserRow>>,
    posts: RwLock<Vec<PostRow>>,
    bumps: AtomicU64,
}

impl Db {
    pub fn seeded() -> Self {
        let user = |id: &str, name: &str| UserRow {
            id: id.to_string(),
            name: name.to_string(),
            email: format!("{}@example.com", name.to_lowercase()),
        };
        let post = |id: &str, author: &str, title: &str, body: &str| PostRow {
            id: id.to_string(),
            title: title.to_string(),
            body: body.to_string(),
            author_id: author.to_string(),
        };
        Db {
            users: RwLock::new(vec![
                user("1", "Alice"),
                user("2", "Bob"),
                user("3", "Carol"),
            ]),
            posts: RwLock::new(vec![
                post(
                    "1",
                    "1",
                    "Hello, world",
                    "Alice's first post: caching GraphQL is fun.",
                ),
                post(
                    "2",
                    "2",
                    "Coalescing requests",
                    "Bob explains how identical in-flight queries can share one origin fetch.",
                ),
                post(
                    "3",
                    "1",
                    "Normalising queries",
                    "Whitespace, comments and argument order should not split the cache.",
                ),
                post(
                    "4",
                    "3",
                    "Vary and cookies",
                    "Carol on why per-user responses must never be shared.",
                ),
                post(
                    "5",
                    "2",
                    "TTL tuning",
                    "Short TTLs plus coalescing go a long way.",
                ),
                post(
                    "6",
                    "3",
                    "Benchmarks",
                    "Numbers from a 2-core machine, with and without the cache.",
                ),
            ]),
            bumps: AtomicU64::new(0),
        }
    }

    fn read_posts(&self) -> RwLockReadGuard<'_, Vec<PostRow>> {
        // A poisoned lock only means another thread panicked mid-update; the
        // data (a Vec we only push to) is still usable.
        self.posts.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_posts(&self) -> RwLockWriteGuard<'_, Vec<PostRow>> {
        self.posts.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read_users(&self) -> RwLockReadGuard<'_, Vec<UserRow>> {
        // Same reasoning as `read_posts`: a writer only ever replaces a
        // user's name in place, so the data stays consistent.
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_users(&self) -> RwLockWriteGuard<'_, Vec<UserRow>> {
        self.users.write().unwrap_or_else(|e| e.into_inner())
    }

    /// All users, in id order.
    fn users(&self) -> Vec<UserRow> {
        self.read_users().clone()
    }

    fn user(&self, id: &str) -> Option<UserRow> {
        self.read_users().iter().find(|u| u.id == id).cloned()
    }

    /// Finds a user by id or (case-insensitively) by name.
    pub fn user_by_subject(&self, subject: &str) -> Option<UserRow> {
        self.read_users()
            .iter()
            .find(|u| u.id == subject || u.name.eq_ignore_ascii_case(subject))
            .cloned()
    }

    /// Sets a user's name and returns the updated row, or `None` for an
    /// unknown id.
    fn rename_user(&self, id: &str, name: String) -> Option<UserRow> {
        let mut users = self.write_users();
        let row = users.iter_mut().find(|u| u.id == id)?;
        row.name = name;
        Some(row.clone())
    }
}

pub fn build_schema() -> OriginSchema {
    Schema::build(Query, Mutation, EmptySubscription)
        .data(Db::seeded())
        // The parser itself stops at 64 nested selection sets; match it
        // instead of async-graphql's default of 32.
        .limit_recursive_depth(64)
        // Only rejects documents with more than 100k fields.
        .limit_complexity(100_000)
        .finish()
}

fn db<'a>(ctx: &Context<'a>) -> Result<&'a Db> {
    ctx.data::<Db>()
}

/// Charges `n` resolved objects against the request's budget.
fn charge(ctx: &Context<'_>, n: usize) -> Result<()> {
    if let Some(meta) = ctx.data_opt::<RequestMeta>() {
        let before = meta.objects.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > OBJECT_BUDGET {
            return Err(Error::new(format!(
                "response too large: more than {OBJECT_BUDGET} objects"
            )));
        }
    }
    Ok(())
}

fn clamp_i32(v: u64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

pub struct User(UserRow);

#[Object]
impl User {
    async fn id(&self) -> ID {
        ID(self.0.id.clone())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn email(&self) -> &str {
        &self.0.email
    }
    async fn posts(&self, ctx: &Context<'_>) -> Result<Vec<Post>> {
        let posts: Vec<Post> = db(ctx)?
            .read_posts()
            .iter()
            .filter(|p| p.author_id == self.0.id)
            .cloned()
            .map(Post)
            .collect();
        charge(ctx, posts.len())?;
        Ok(posts)
    }
}

pub struct Post(PostRow);

#[Object]
impl Post {
    async fn id(&self) -> ID {
        ID(self.0.id.clone())
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    async fn body(&self) -> &str {
        &self.0.body
    }
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        charge(ctx, 1)?;
        db(ctx)?
            .user(&self.0.author_id)
            .map(User)
            .ok_or_else(|| Error::new("author not found"))
    }
}

#[derive(Enum, Copy, Clone, Eq, PartialEq, Default)]
pub enum PostOrder {
    #[default]
    Newest,
    Oldest,
}

#[derive(InputObject, Clone, Default, Debug)]
pub struct EchoInput {
    pub a: MaybeUndefined<String>,
    pub b: MaybeUndefined<i32>,
    pub nested: MaybeUndefined<Box<EchoInput>>,
}

/// Canonical JSON of an `EchoInput`: keys sorted, absent fields omitted,
/// explicit nulls kept, no whitespace.
pub fn canonical_echo_input(input: &EchoInput) -> String {
    let mut out = String::new();
    write_echo_input(input, &mut out);
    out
}

fn write_echo_input(input: &EchoInput, out: &mut String) {
    // Field names are written in sorted order: a < b < nested.
    out.push('{');
    let mut first = true;
    let mut key = |out: &mut String, name: &str| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        out.push_str(name);
        out.push_str("\":");
    };
    match &input.a {
        MaybeUndefined::Undefined => {}
        MaybeUndefined::Null => {
            key(out, "a");
            out.push_str("null");
        }
        MaybeUndefined::Value(s) => {
            key(out, "a");
            out.push_str(&serde_json::Value::String(s.clone()).to_string());
        }
    }
    match &input.b {
        MaybeUndefined::Undefined => {}
        MaybeUndefined::Null => {
            key(out, "b");
            out.push_str("null");
        }
        MaybeUndefined::Value(b) => {
            key(out, "b");
            out.push_str(&b.to_string());
        }
    }
    match &input.nested {
        MaybeUndefined::Undefined => {}
        MaybeUndefined::Null => {
            key(out, "nested");
            out.push_str("null");
        }
        MaybeUndefined::Value(n) => {
            key(out, "nested");
            write_echo_input(n, out);
        }
    }
    out.push('}');
}

pub struct Query;

#[Object]
impl Query {
    async fn users(&self, ctx: &Context<'_>) -> Result<Vec<User>> {
        let users = db(ctx)?.users();
        charge(ctx, users.len())?;
        Ok(users.into_iter().map(User).collect())
    }

    async fn user(&self, ctx: &Context<'_>, id: ID) -> Result<Option<User>> {
        charge(ctx, 1)?;
        Ok(db(ctx)?.user(&id).map(User))
    }

    async fn posts(
        &self,
        ctx: &Context<'_>,
        author_id: Option<ID>,
        #[graphql(default = 10)] first: i32,
        #[graphql(default)] order_by: PostOrder,
    ) -> Result<Vec<Post>> {
        let posts = db(ctx)?.read_posts();
        let take = usize::try_from(first.max(0)).unwrap_or(0);
        let matches = |p: &&PostRow| author_id.as_ref().is_none_or(|a| p.author_id == a.0);
        let result: Vec<Post> = match order_by {
            PostOrder::Newest => posts
                .iter()
                .rev()
                .filter(matches)
                .take(take)
                .cloned()
                .map(Post)
                .collect(),
            PostOrder::Oldest => posts
                .iter()
                .filter(matches)
                .take(take)
                .cloned()
                .map(Post)
                .collect(),
        };
        charge(ctx, result.len())?;
        Ok(result)
    }

    async fn post(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Post>> {
        charge(ctx, 1)?;
        Ok(db(ctx)?
            .read_posts()
            .iter()
            .find(|p| p.id == id.0)
            .cloned()
            .map(Post))
    }

    /// The user named by `authorization: Bearer <token>` (plain subject or an
    /// unverified JWT's `sub`), matched by id or lower-case name.
    async fn me(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let Some(meta) = ctx.data_opt::<RequestMeta>() else {
            return Ok(None);
        };
        let subject = meta
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_subject);
        Ok(subject
            .and_then(|s| db(ctx).ok()?.user_by_subject(&s))
            .map(User))
    }

    async fn echo(&self, value: Option<String>) -> Option<String> {
        value
    }

    /// Canonical JSON (sorted keys, absent fields omitted) of the input.
    async fn echo_input(&self, input: Option<EchoInput>) -> Option<String> {
        input.map(|i| canonical_echo_input(&i))
    }

    /// The global request counter as of this request's arrival.
    async fn request_count(&self, ctx: &Context<'_>) -> i32 {
        ctx.data_opt::<RequestMeta>()
            .map(|m| clamp_i32(m.seq))
            .unwrap_or(0)
    }

    /// The value of a request header (several values are joined with ", ").
    async fn header_value(&self, ctx: &Context<'_>, name: String) -> Option<String> {
        let meta = ctx.data_opt::<RequestMeta>()?;
        let name = name.to_ascii_lowercase();
        let values: Vec<String> = meta
            .headers
            .get_all(name.as_str())
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        if values.is_empty() {
            None
        } else {
            Some(values.join(", "))
        }
    }

    /// A string of `size` 'x' characters (at most 8 MiB; at most 64 MiB
    /// over all `big` fields of one HTTP request).
    async fn big(&self, ctx: &Context<'_>, size: i32) -> Result<String> {
        if size < 0 {
            return Err(Error::new("size must not be negative"));
        }
        let size = usize::try_from(size).unwrap_or(0).min(BIG_MAX);
        if let Some(meta) = ctx.data_opt::<RequestMeta>() {
            let before = meta.big_used.fetch_add(size, Ordering::Relaxed);
            if before.saturating_add(size) > BIG_BUDGET {
                return Err(Error::new("big: per-request budget of 64 MiB exceeded"));
            }
        }
        Ok("x".repeat(size))
    }

    /// Always fails with "boom".
    async fn fail(&self) -> Result<Option<String>> {
        Err(Error::new("boom"))
    }

    /// Sleeps `ms` milliseconds (0..=10000, clamped) and returns the value slept.
    async fn slow_field(&self, ms: i32) -> i32 {
        let ms = ms.clamp(0, SLOW_FIELD_MAX_MS);
        tokio::time::sleep(Duration::from_millis(u64::from(ms.unsigned_abs()))).await;
        ms
    }
}

pub struct Mutation;

#[Object]
impl Mutation {
    async fn create_post(
        &self,
        ctx: &Context<'_>,
        author_id: ID,
        title: String,
        body: Option<String>,
    ) -> Result<Post> {
        let db = db(ctx)?;
        if db.user(&author_id).is_none() {
            return Err(Error::new(format!("unknown author {}", author_id.0)));
        }
        let mut posts = db.write_posts();
        let row = PostRow {
            id: (posts.len() + 1).to_string(),
            title,
            body: body.unwrap_or_default(),
            author_id: author_id.0,
        };
        posts.push(row.clone());
        Ok(Post(row))
    }

    /// Sets the name of user `id` (the email is unchanged) and returns the
    /// updated user, or null when no user has that id.
    async fn update_user(&self, ctx: &Context<'_>, id: ID, name: String) -> Result<Option<User>> {
        charge(ctx, 1)?;
        Ok(db(ctx)?.rename_user(&id, name).map(User))
    }

    /// Increments a counter (separate from the request counter) and returns it.
    async fn bump(&self, ctx: &Context<'_>) -> Result<i32> {
        let n = db(ctx)?.bumps.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(clamp_i32(n))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn input(a: Option<&str>, b: Option<i32>, nested: Option<EchoInput>) -> EchoInput {
        EchoInput {
            a: a.map(|s| MaybeUndefined::Value(s.to_string()))
                .unwrap_or(MaybeUndefined::Undefined),
            b: b.map(MaybeUndefined::Value)
                .unwrap_or(MaybeUndefined::Undefined),
            nested: nested
                .map(|n| MaybeUndefined::Value(Box::new(n)))
                .unwrap_or(MaybeUndefined::Undefined),
        }
    }

    #[test]
    fn canonical_json_shapes() {
        assert_eq!(canonical_echo_input(&EchoInput::default()), "{}");
        assert_eq!(
            canonical_echo_input(&input(Some("x\"y"), Some(-3), None)),
            r#"{"a":"x\"y","b":-3}"#
        );
        assert_eq!(
            canonical_echo_input(&input(None, Some(1), Some(input(Some("n"), None, None)))),
            r#"{"b":1,"nested":{"a":"n"}}"#
        );
        let with_null = EchoInput {
            a: MaybeUndefined::Null,
            ..EchoInput::default()
        };
        assert_eq!(canonical_echo_input(&with_null), r#"{"a":null}"#);
    }

    fn exec(query: &str) -> serde_json::Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let schema = build_schema();
        let resp = rt.block_on(schema.execute(query));
        serde_json::to_value(&resp).unwrap()
    }

    #[test]
    fn echo_input_is_order_independent() {
        let q1 = r#"{ echoInput(input: {nested: {b: 2, a: "z"}, b: 1, a: "q"}) }"#;
        let q2 = r#"{ echoInput(input: {a: "q", b: 1, nested: {a: "z", b: 2}}) }"#;
        let r1 = exec(q1);
        let r2 = exec(q2);
        assert_eq!(r1, r2);
        assert_eq!(
            r1["data"]["echoInput"],
            r#"{"a":"q","b":1,"nested":{"a":"z","b":2}}"#
        );
    }

    #[test]
    fn posts_ordering_and_filter() {
        let r = exec(
            r#"{ posts(first: 2) { id } old: posts(orderBy: OLDEST, authorId: "1") { id author { name } } }"#,
        );
        assert_eq!(
            r["data"]["posts"],
            serde_json::json!([{"id":"6"},{"id":"5"}])
        );
        assert_eq!(
            r["data"]["old"],
            serde_json::json!([{"id":"1","author":{"name":"Alice"}},{"id":"3","author":{"name":"Alice"}}])
        );
    }

    /// Runs `queries` in order against one schema (so mutations are seen by
    /// later queries) and returns each response.
    fn exec_seq(queries: &[&str]) -> Vec<serde_json::Value> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let schema = build_schema();
        queries
            .iter()
            .map(|q| serde_json::to_value(rt.block_on(schema.execute(*q))).unwrap())
            .collect()
    }

    #[test]
    fn update_user_is_seen_by_later_queries() {
        let r = exec_seq(&[
            r#"mutation { updateUser(id: "2", name: "Robert") { __typename id name } }"#,
            r#"{ user(id: "2") { id name email } users { id name } post(id: "2") { author { id name } } }"#,
        ]);
        assert!(r[0].get("errors").is_none(), "{}", r[0]);
        assert_eq!(
            r[0]["data"]["updateUser"],
            serde_json::json!({"__typename":"User","id":"2","name":"Robert"})
        );
        assert!(r[1].get("errors").is_none(), "{}", r[1]);
        assert_eq!(
            r[1]["data"]["user"],
            serde_json::json!({"id":"2","name":"Robert","email":"bob@example.com"})
        );
        assert_eq!(
            r[1]["data"]["users"],
            serde_json::json!([
                {"id":"1","name":"Alice"},
                {"id":"2","name":"Robert"},
                {"id":"3","name":"Carol"}
            ])
        );
        assert_eq!(
            r[1]["data"]["post"]["author"],
            serde_json::json!({"id":"2","name":"Robert"})
        );
    }

    #[test]
    fn update_user_unknown_id_is_null() {
        let r =
            exec(r#"mutation { updateUser(id: "999", name: "Nobody") { __typename id name } }"#);
        assert!(r.get("errors").is_none(), "{r}");
        assert_eq!(r["data"]["updateUser"], serde_json::Value::Null);
    }

    #[test]
    fn fail_gives_error_and_null() {
        let r = exec("{ fail echo(value: \"hi\") }");
        assert_eq!(r["data"]["fail"], serde_json::Value::Null);
        assert_eq!(r["data"]["echo"], "hi");
        assert_eq!(r["errors"][0]["message"], "boom");
    }
}
