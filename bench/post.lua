-- wrk script: POSTs one GraphQL body and prints a machine-readable summary line at the end.
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/graphql"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
-- A fleet shares entries behind one name: the host is part of the key.
local host = os.getenv("BENCH_HOST")
if host and host ~= "" then
  wrk.headers["Host"] = host
end
-- The header autocannon sends on every request (the -gw scenarios send what it sends).
local connection = os.getenv("BENCH_CONNECTION")
if connection and connection ~= "" then
  wrk.headers["Connection"] = connection
end
local auth = os.getenv("BENCH_AUTH")
if auth and auth ~= "" then
  wrk.headers["Authorization"] = auth
end

-- BENCH_BODIES_FILE: one body per line, sent in turn (distinct keys), each request formatted once,
-- in init (wrk adds the Host header only then).
local bodies_file = os.getenv("BENCH_BODIES_FILE")
if bodies_file and bodies_file ~= "" then
  local requests, n, i = {}, 0, 0
  function init(args)
    for line in io.lines(bodies_file) do
      n = n + 1
      requests[n] = wrk.format(nil, nil, nil, line)
    end
  end
  function request()
    i = i % n + 1
    return requests[i]
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"non2xx":%d,"socket_errors":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
