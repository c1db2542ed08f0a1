/**
 * The token scripts. Their text is part of the key format: sidecars of two versions share one
 * Redis during a rolling upgrade, so a change here is a change of what both must read.
 */

/** Lua functions the token scripts share: each acts on the keys it is given, nothing else. */
const TOKEN_FUNCTIONS = `
-- The index is marked: its family is revoked, or its user or application deleted, for good.
local function marked(index)
  return redis.call('ZSCORE', index, 'revoked') ~= false
end
-- Joins an index, drops expired members, and keeps the index as long as its last member.
local function join(index, member, expiresAt, now)
  redis.call('ZADD', index, expiresAt, member)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', index, last[2])
end
local function write(key, kind, payload, expiresAt)
  redis.call('DEL', key)
  if kind == 'hash' then
    redis.call('HSET', key, 'r', payload)
  else
    redis.call('SET', key, payload)
  end
  redis.call('PEXPIREAT', key, expiresAt)
end
-- Empties an index and returns its members; marks it when forGood is '1', until its last
-- member's expiry and at least until floor.
local function take(index, forGood, floor)
  local entries = redis.call('ZRANGE', index, 0, -1, 'WITHSCORES')
  redis.call('DEL', index)
  local members = {}
  local last = tonumber(floor)
  for i = 1, #entries, 2 do
    if entries[i] ~= 'revoked' then members[#members + 1] = entries[i] end
    local score = tonumber(entries[i + 1])
    if score > last then last = score end
  end
  if forGood == '1' then
    redis.call('ZADD', index, string.format('%d', last), 'revoked')
    redis.call('PEXPIREAT', index, string.format('%d', last))
  end
  return members
end
`;

// One key per script, for a Cluster: see saveIndexed and revokeIndexed.

const INDEX_ADD = `${TOKEN_FUNCTIONS}
-- KEYS[1] index; ARGV: member, expiresAt (ms), now (ms). 0 when the index is marked.
if marked(KEYS[1]) then return 0 end
join(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return 1
`;

const SAVE_RECORD = `${TOKEN_FUNCTIONS}
-- KEYS[1] record; ARGV: kind ('string'|'hash'), payload, expiresAt (ms)
write(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return 1
`;

/** A script, not ZSCORE: a script runs on the master even when reads go to replicas. */
const IS_MEMBER = `
-- KEYS[1] index; ARGV[1] member
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
return 0
`;

const REVOKE_INDEX = `${TOKEN_FUNCTIONS}
-- KEYS[1] index; ARGV: '1' to mark it, mark expiry floor (ms). Returns the members.
return take(KEYS[1], ARGV[1], ARGV[2])
`;

// The same operations in one script each, where every key is on one server (no Cluster).

const SAVE_INDEXED = `${TOKEN_FUNCTIONS}
-- KEYS[1] record, KEYS[2..] indexes; ARGV: member, expiresAt (ms), now (ms), kind, payload.
-- 0 when an index is marked: nothing is written.
for i = 2, #KEYS do
  if marked(KEYS[i]) then return 0 end
end
write(KEYS[1], ARGV[4], ARGV[5], ARGV[2])
for i = 2, #KEYS do join(KEYS[i], ARGV[1], ARGV[2], ARGV[3]) end
return 1
`;

const REVOKE = `${TOKEN_FUNCTIONS}
-- KEYS[1] index, or '' to revoke the members given; ARGV: '1' to mark the index, mark expiry
-- floor (ms), key prefix, channel, now (ms), members... Deletes the records, publishes the
-- access tokens, returns how many records went.
local members
if KEYS[1] ~= '' then
  members = take(KEYS[1], ARGV[1], ARGV[2])
else
  members = {}
  for i = 6, #ARGV do members[#members + 1] = ARGV[i] end
end
local removed = 0
local access = {}
for _, member in ipairs(members) do
  removed = removed + redis.call('DEL', ARGV[3] .. member)
  if string.sub(member, 1, 3) == 'at:' then access[#access + 1] = string.sub(member, 4) end
end
if #access > 0 then
  redis.call('PUBLISH', ARGV[4], '{"accessTokens":' .. cjson.encode(access) .. ',"publishedAt":' .. ARGV[5] .. '}')
end
return removed
`;

export const SAVE_RECORD_SCRIPT = { numberOfKeys: 1, lua: SAVE_RECORD } as const;

export const TOKEN_SCRIPTS = {
  indexAdd: { numberOfKeys: 1, lua: INDEX_ADD },
  saveRecord: SAVE_RECORD_SCRIPT,
  isMember: { numberOfKeys: 1, lua: IS_MEMBER },
  revokeIndex: { numberOfKeys: 1, lua: REVOKE_INDEX },
  saveIndexed: { lua: SAVE_INDEXED },
  revoke: { numberOfKeys: 1, lua: REVOKE },
} as const;
