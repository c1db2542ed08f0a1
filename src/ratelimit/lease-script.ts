/**
 * The one script of the lease protocol, on the one key of a bucket (so a Cluster runs it where
 * that key lives, no hash tag needed): it takes back the permits a sidecar did not use, charges
 * the quota for what a sidecar admitted on its own while the store was away, then grants up to
 * `want` permits from the bucket's GCRA and quota counters, and keeps a decayed count of every
 * grant (how each sidecar learns its share of the traffic, for an outage). Time is the server's
 * (TIME), so sidecars' clocks do not matter.
 *
 * Hash fields: tat (GCRA theoretical arrival time, ms), hour/hourCount, day/dayCount (calendar
 * window numbers since the epoch, UTC, and requests granted in them), granted/grantedAt (the
 * decayed grant count and when it was decayed to).
 *
 * Returns {granted, nextMs (until the store has one more permit: the rate, or the quota's
 * window end), quotaLeft (-1: no quota), quotaResetMs, left (permits the rate still holds),
 * grantRate (decayed grants x 1000)}.
 */
export const LEASE_SCRIPT = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local returned = tonumber(ARGV[4])
local charged = tonumber(ARGV[5])
local perHour = tonumber(ARGV[6])
local perDay = tonumber(ARGV[7])
local decay = tonumber(ARGV[8])
local state = redis.call('HMGET', KEYS[1], 'tat', 'hour', 'hourCount', 'day', 'dayCount', 'granted', 'grantedAt')
local tat = (tonumber(state[1]) or now) - returned * interval
if tat < now then tat = now end
-- A bucket at most empty under the policy as it is now (a reload may have changed its rate).
if tat > now + burst * interval then tat = now + burst * interval end
local hour = math.floor(now / 3600000)
local day = math.floor(now / 86400000)
local hourCount = 0
if tonumber(state[2]) == hour then hourCount = tonumber(state[3]) end
local dayCount = 0
if tonumber(state[4]) == day then dayCount = tonumber(state[5]) end
hourCount = math.max(0, hourCount - returned + charged)
dayCount = math.max(0, dayCount - returned + charged)
local grant = math.max(0, math.min(want, math.floor((now + burst * interval - tat) / interval)))
local quotaLeft = -1
if perHour > 0 then quotaLeft = math.max(0, perHour - hourCount) end
if perDay > 0 and (quotaLeft < 0 or perDay - dayCount < quotaLeft) then quotaLeft = math.max(0, perDay - dayCount) end
if quotaLeft >= 0 and grant > quotaLeft then grant = quotaLeft end
tat = tat + grant * interval
hourCount = hourCount + grant
dayCount = dayCount + grant
if quotaLeft >= 0 then quotaLeft = quotaLeft - grant end
-- Until the quota's window ends: the latest end among the exhausted ones.
local quotaResetMs = 0
if perHour > 0 and hourCount >= perHour then quotaResetMs = (hour + 1) * 3600000 - now end
if perDay > 0 and dayCount >= perDay then quotaResetMs = (day + 1) * 86400000 - now end
local nextMs = math.max(0, math.ceil(tat + interval - burst * interval - now))
if quotaLeft == 0 then nextMs = math.max(nextMs, quotaResetMs) end
local granted = tonumber(state[6]) or 0
local grantedAt = tonumber(state[7]) or now
granted = granted * math.exp(-(now - grantedAt) / decay) + grant
redis.call('HSET', KEYS[1], 'tat', string.format('%.3f', tat), 'hour', hour, 'hourCount', hourCount, 'day', day, 'dayCount', dayCount,
  'granted', string.format('%.6f', granted), 'grantedAt', now)
local ttl = math.ceil(burst * interval) + 3 * decay
if perHour > 0 then ttl = math.max(ttl, (hour + 1) * 3600000 - now) end
if perDay > 0 then ttl = math.max(ttl, (day + 1) * 86400000 - now) end
redis.call('PEXPIRE', KEYS[1], ttl)
return {grant, nextMs, quotaLeft, quotaResetMs, math.floor((now + burst * interval - tat) / interval), math.floor(granted * 1000)}
`;
