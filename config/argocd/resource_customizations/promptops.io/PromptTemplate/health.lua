-- Argo CD health of a promptops.io PromptTemplate: what kstatus reads from
-- its status (the README's status table), in Argo CD's words. Healthy where
-- kstatus gives Current, Progressing where it gives InProgress (or
-- Terminating), Degraded where it gives Failed. An object the manager has
-- not written a status for yet is Progressing (kstatus reads it Current).
-- A rollout (status.rollout) reads so too: Progressing while it runs
-- (Reconciling=True, reason RolloutProgressing), Suspended while a step
-- holds until promoted (reason RolloutPaused; kstatus: InProgress),
-- Degraded once aborted (Stalled=True, reason RolloutAborted), Healthy once
-- promoted (Ready=True).
local hs = {}
if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Being deleted"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the promptops manager to reconcile it"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "Generation " .. generation .. " is not reconciled yet (the status is of generation " .. observed .. ")"
  return hs
end
local ready = nil
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Reconciling" and c.status == "True" and c.reason == "RolloutPaused" then
    hs.status = "Suspended"
    hs.message = c.message or c.reason
    return hs
  end
  if c.type == "Reconciling" and c.status == "True" then
    hs.status = "Progressing"
    hs.message = c.message or c.reason
    return hs
  end
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = c.message or c.reason
    return hs
  end
  if c.type == "Ready" then
    ready = c
  end
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the promptops manager to reconcile it"
elseif ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ready.reason
else
  hs.status = "Progressing"
  hs.message = ready.message or ready.reason
end
return hs
