-- POST a JSON body (BODY_FILE env var) with the bearer token (TOKEN env var) on every request.
-- Used by bench/api_load.py for POST /api/v1/quotes/; `done` prints a machine-readable summary line.
local f = assert(io.open(os.getenv("BODY_FILE"), "r"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")

dofile(os.getenv("SUMMARY_LUA"))
