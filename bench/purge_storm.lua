-- wrk script for `make bench-purges` (bench/purges.py): POSTs purges to an Envoy's purge API
-- (the internal listener's /graphql-cache/purge), one body per line of PURGE_BODIES_FILE, sent in
-- turn (round-robin; each wrk thread starts at its own offset), with the operator's bearer token
-- PURGE_TOKEN. Counts the answers by status and the largest "owed" any answer reported, and prints
-- one machine-readable line at the end: PURGE_JSON {...}.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local token = assert(os.getenv("PURGE_TOKEN"), "PURGE_TOKEN")
wrk.headers["Authorization"] = "Bearer " .. token

local threads = {}

function setup(thread)
  thread:set("offset", #threads)
  table.insert(threads, thread)
end

-- Per thread: its requests, formatted once (wrk adds the Host header only in init), and what its
-- answers said.
local requests, n, i = {}, 0, 0
statuses, max_owed, fleet = {}, 0, {}

function init(args)
  local path = assert(os.getenv("PURGE_BODIES_FILE"), "PURGE_BODIES_FILE")
  for line in io.lines(path) do
    n = n + 1
    requests[n] = wrk.format(nil, nil, nil, line)
  end
  i = (offset or 0) * 7 % n
end

function request()
  i = i % n + 1
  return requests[i]
end

function response(status, headers, body)
  local s = tostring(status)
  statuses[s] = (statuses[s] or 0) + 1
  local f = body and string.match(body, '"fleet":"(%a+)"')
  if f then
    fleet[f] = (fleet[f] or 0) + 1
  end
  local owed = body and tonumber(string.match(body, '"owed":(%d+)'))
  if owed and owed > max_owed then
    max_owed = owed
  end
end

local function json_counts(t)
  local parts = {}
  for k, v in pairs(t) do
    table.insert(parts, string.format('"%s":%d', k, v))
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

function done(summary, latency, reqs)
  local all, by_fleet, owed = {}, {}, 0
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses") or {}) do
      all[k] = (all[k] or 0) + v
    end
    for k, v in pairs(t:get("fleet") or {}) do
      by_fleet[k] = (by_fleet[k] or 0) + v
    end
    owed = math.max(owed, t:get("max_owed") or 0)
  end
  io.write(string.format(
    'PURGE_JSON {"requests":%d,"duration_us":%d,"non2xx":%d,"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},'
      .. '"statuses":%s,"fleet":%s,"max_owed":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    json_counts(all), json_counts(by_fleet), owed,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
