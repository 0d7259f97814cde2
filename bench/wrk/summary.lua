-- Shared `response` / `done` hooks: count non-2xx answers and print one JSON line
-- (BENCH {...}) with requests/s and latency percentiles in microseconds for bench/api_load.py.
bad = 0  -- global: done() reads it from each thread with t:get("bad")
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function response(status, headers, body)
  if status < 200 or status >= 300 then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local errors = summary.errors
  local non2xx = 0
  for _, t in ipairs(threads) do
    non2xx = non2xx + (t:get("bad") or 0)
  end
  local secs = summary.duration / 1e6
  io.write(string.format(
    'BENCH {"requests": %d, "seconds": %.3f, "rps": %.2f, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "non2xx": %d, "socket_errors": %d}\n',
    summary.requests, secs, summary.requests / secs, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, non2xx,
    errors.connect + errors.read + errors.write + errors.timeout))
end
