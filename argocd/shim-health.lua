-- Argo CD health check of the Shim kind (runtime.spinkube.dev/v1alpha1), for argocd-cm's
-- resource.customizations.health.runtime.spinkube.dev_Shim. Argo CD sets `obj` to the live
-- Shim and expects a table { status = ..., message = ... } back. Lua 5.1.
--
-- The controller (rcm-controller) writes three conditions: Ready, Progressing, Degraded,
-- each with observedGeneration. A Shim is
--   Degraded     when Degraded is True (a node failed past the threshold, an invalid Shim,
--                a RuntimeClass that belongs to someone else);
--   Healthy      when Ready is True and Progressing is not True, for the current generation;
--   Progressing  otherwise: no status yet, a status of an older generation, an install or
--                uninstall in flight, nodes retrying or waiting.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  return fallback
end

local generation = obj.metadata.generation
if obj.metadata.deletionTimestamp ~= nil then
  -- Argo CD waits for a deletion to finish before the next (lower) wave goes.
  local p = condition("Progressing")
  hs.status = "Progressing"
  if p ~= nil and p.reason == "Deleting" then
    hs.message = text(p, "")
  else
    hs.message = "The Shim is being deleted; the controller uninstalls it from every node first"
  end
  return hs
end

if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe the Shim"
  return hs
end

if generation ~= nil and obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. generation
  return hs
end

local degraded = condition("Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = text(degraded, "Degraded")
  return hs
end

local ready = condition("Ready")
local progressing = condition("Progressing")
if ready ~= nil and ready.status == "True" and (progressing == nil or progressing.status ~= "True") then
  hs.status = "Healthy"
  hs.message = text(ready, "Installed on every selected node")
  return hs
end

hs.status = "Progressing"
hs.message = text(progressing, text(ready, "Installing"))
return hs
