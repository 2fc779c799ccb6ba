-- Argo CD health for gymsandbox.dev GymHost and EpisodeSandbox (Lua 5.1, base library only).
-- Degraded only when nothing but a change to the spec or the image helps (failure.kind Policy or Workload,
-- or Expired); starting, queued or waiting on the cluster (failure.kind Infrastructure) is Progressing.
local hs = { status = "Progressing", message = "waiting for the operator" }
local status = obj.status
if status == nil or status.observedGeneration ~= obj.metadata.generation then
  return hs
end
local ready = nil
for _, condition in ipairs(status.conditions or {}) do
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready == nil then
  return hs
end
hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
local kind = status.failure and status.failure.kind
if ready.status == "True" then
  hs.status = "Healthy"
elseif kind == "Policy" or kind == "Workload" or ready.reason == "Expired" then
  hs.status = "Degraded"
end
return hs
