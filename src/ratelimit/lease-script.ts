/**
 * The one script of the lease protocol, on the one key of a bucket (so a Cluster runs it where
 * that key lives, no hash tag needed). It is ./memory-leases.ts step for step; one contract
 * suite (test/rate-limit-leases.test.ts) runs against both. In one call it:
 *
 * 1. reads the sidecar's last report (`h:<holder>`: its number, the grant it got and that
 *    grant's hour and day). A report sent again under the same number was applied already and
 *    its answer lost (a command timeout): its permits are not given back twice, and the grant
 *    it got, which never reached the sidecar, goes back to the quota of its windows;
 * 2. gives back to the quota the permits the sidecar did not use, in the windows they were
 *    granted in (a window that has ended keeps its count);
 * 3. grants up to `want` permits from the GCRA and the quotas. A grant may reach `ahead`
 *    permits into the rate's future (half a second of it, when that is more than the burst);
 *    the answer says when the first of them is due (`startMs`) and the sidecar spends them no
 *    sooner than one interval apart, so every permit is spent no earlier than the GCRA allows.
 *
 * Time is the server's (TIME), so sidecars' clocks do not matter. Given-back permits return to
 * the quotas only: the rate's permits come again with time, and a permit given back to the rate
 * could be a moment another sidecar already holds.
 *
 * Hash fields: tat (GCRA theoretical arrival time, ms), hour/hourCount, day/dayCount (calendar
 * window numbers since the epoch, UTC, and requests granted in them), granted/grantedAt (the
 * decayed grant count and when it was decayed to), h:<holder> (a sidecar's last report).
 *
 * Returns {granted, nextMs (until the store has one more permit: the rate, or the quota's
 * window end), quotaLeft (-1: no quota), quotaResetMs, left (permits the rate holds now, within
 * the burst), grantRate (decayed grants x 1000), startMs (when the first granted permit is due,
 * from now; negative: already), hour, day}.
 */
export const LEASE_SCRIPT = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local returned = tonumber(ARGV[4])
local perHour = tonumber(ARGV[5])
local perDay = tonumber(ARGV[6])
local decay = tonumber(ARGV[7])
local ahead = tonumber(ARGV[8])
local holder = ARGV[9]
local report = tonumber(ARGV[10])
local returnedHour = tonumber(ARGV[11])
local returnedDay = tonumber(ARGV[12])
local state = redis.call('HMGET', KEYS[1], 'tat', 'hour', 'hourCount', 'day', 'dayCount', 'granted', 'grantedAt', 'h:' .. holder)
local hour = math.floor(now / 3600000)
local day = math.floor(now / 86400000)
local hourCount = 0
if tonumber(state[2]) == hour then hourCount = tonumber(state[3]) end
local dayCount = 0
if tonumber(state[4]) == day then dayCount = tonumber(state[5]) end
local function giveBack(count, ofHour, ofDay)
  if ofHour == hour then hourCount = math.max(0, hourCount - count) end
  if ofDay == day then dayCount = math.max(0, dayCount - count) end
end
if holder ~= '' and state[8] then
  local lastReport, lastGrant, lastHour, lastDay = string.match(state[8], '^(%d+) (%d+) (%d+) (%d+)$')
  if tonumber(lastReport) == report then
    returned = 0
    giveBack(tonumber(lastGrant), tonumber(lastHour), tonumber(lastDay))
  end
end
giveBack(returned, returnedHour, returnedDay)
local tat = tonumber(state[1]) or now
if tat < now then tat = now end
-- A bucket at most empty under the policy as it is now (a reload may have changed its rate).
local reach = math.max(burst, ahead)
if tat > now + reach * interval then tat = now + reach * interval end
local grant = math.max(0, math.min(want, math.floor((now + reach * interval - tat) / interval)))
local quotaLeft = -1
if perHour > 0 then quotaLeft = math.max(0, perHour - hourCount) end
if perDay > 0 and (quotaLeft < 0 or perDay - dayCount < quotaLeft) then quotaLeft = math.max(0, perDay - dayCount) end
if quotaLeft >= 0 and grant > quotaLeft then grant = quotaLeft end
local startMs = tat + interval - burst * interval - now
tat = tat + grant * interval
hourCount = hourCount + grant
dayCount = dayCount + grant
if quotaLeft >= 0 then quotaLeft = quotaLeft - grant end
-- Until the quota's window ends: the latest end among the exhausted ones.
local quotaResetMs = 0
if perHour > 0 and hourCount >= perHour then quotaResetMs = (hour + 1) * 3600000 - now end
if perDay > 0 and dayCount >= perDay then quotaResetMs = (day + 1) * 86400000 - now end
local nextMs = math.max(0, math.ceil(tat + interval - reach * interval - now))
if quotaLeft == 0 then nextMs = math.max(nextMs, quotaResetMs) end
local granted = tonumber(state[6]) or 0
local grantedAt = tonumber(state[7]) or now
granted = granted * math.exp(-(now - grantedAt) / decay) + grant
local fields = {'tat', string.format('%.3f', tat), 'hour', hour, 'hourCount', hourCount, 'day', day, 'dayCount', dayCount,
  'granted', string.format('%.6f', granted), 'grantedAt', now}
if holder ~= '' then
  fields[#fields + 1] = 'h:' .. holder
  fields[#fields + 1] = string.format('%d %d %d %d', report, grant, hour, day)
end
redis.call('HSET', KEYS[1], unpack(fields))
local ttl = math.ceil(reach * interval) + 3 * decay
if perHour > 0 then ttl = math.max(ttl, (hour + 1) * 3600000 - now) end
if perDay > 0 then ttl = math.max(ttl, (day + 1) * 86400000 - now) end
redis.call('PEXPIRE', KEYS[1], ttl)
local left = math.max(0, math.floor((now + burst * interval - tat) / interval))
return {grant, nextMs, quotaLeft, quotaResetMs, left, math.floor(granted * 1000), math.floor(startMs), hour, day}
`;
