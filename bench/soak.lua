-- wrk script for `make soak`: SOAK_COUNT distinct GraphQL keys (a distinct echo value, and an
-- answer of about 1 KB), each asked twice in a row, split over the threads, numbered from
-- SOAK_START; the thread stops when its share is sent. Asked twice, a key is worth admitting over
-- one asked once, so the table keeps evicting rather than refusing everything new.
local start = tonumber(os.getenv("SOAK_START") or "0")
local count = tonumber(os.getenv("SOAK_COUNT") or "1000")
local threads = tonumber(os.getenv("SOAK_THREADS") or "1")
local counter = 0
local share = 0
-- A global, not a local: `thread:set` writes each thread's globals.
next_id = 0
id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end

function init(args)
  share = math.floor(count / threads)
  counter = 0
end

function request()
  if counter >= 2 * share then
    wrk.thread:stop()
  end
  local n = start + id * share + math.floor(counter / 2)
  counter = counter + 1
  local body = '{"query":"{ echo(value: \\"k' .. n .. '\\") big(size: 900) }"}'
  return wrk.format("POST", "/graphql", { ["Content-Type"] = "application/json" }, body)
end
