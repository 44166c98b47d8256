-- Argo CD health of a gpuplane.dev resource, read the way kstatus reads it (cli-utils v0.37):
-- being deleted or a spec generation not yet observed is Progressing; Stalled=True is
-- Degraded (a blocker or a failure that needs a person); Reconciling=True is Progressing;
-- Ready=True is Healthy. Unlike kstatus, an object the agent has not written yet is
-- Progressing, not Healthy.
local hs = { status = "Progressing", message = "Waiting for the gpuplane agent" }
if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.message = "Being deleted; the agent cleans the host first"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.message = "Generation " .. generation .. " not observed yet (status describes " .. observed .. ")"
  return hs
end
local ready = nil
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = (c.reason or "") .. ": " .. (c.message or "")
    return hs
  end
  if c.type == "Reconciling" and c.status == "True" then
    hs.message = (c.reason or "") .. ": " .. (c.message or "")
    return hs
  end
  if c.type == "Ready" then
    ready = c
  end
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
elseif ready ~= nil then
  hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
end
return hs
