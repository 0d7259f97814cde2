-- GET with either the bearer token (TOKEN env var) or the console session cookie (COOKIE env var).
local token = os.getenv("TOKEN")
local cookie = os.getenv("COOKIE")
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end
if cookie and cookie ~= "" then
  wrk.headers["Cookie"] = cookie
end

dofile(os.getenv("SUMMARY_LUA"))
