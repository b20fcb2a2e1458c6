//! The server-side scripts: every state change, and every read that reports
//! a record's age, is one script, which Redis runs atomically (no other
//! command runs while it does).
//!
//! A record is a hash:
//!
//! | field | holds |
//! | --- | --- |
//! | `p`, `s` | the partition and, when there is one, the sort key |
//! | `o`, `v` | the owner and the record version number (RVN) |
//! | `l` | the lease in milliseconds |
//! | `x` | `1` when released, `0` when held |
//! | `f` | the fence |
//! | `d` | the data, when there is some |
//! | `e` | the expiry time (Unix seconds), when set |
//! | `t` | when the record was written, in milliseconds on the server's clock (`TIME`) |
//! | `n` | which node's clock `t` is on: its `run_id` (`INFO server`); absent when the user may not run `INFO` |
//!
//! Every script returns the node's time and `run_id` beside the records: a
//! record's age is the difference of two readings of one clock only when
//! the node reading it is the node that stamped it. After a failover, a
//! slot migration or a restore (which copy the hash as it is), the record's
//! age is unknown until its holder writes it again.

use redis::Script;

/// Conditional writes of one or more locks, all or nothing.
///
/// `KEYS`: for each write its record, its partition's fence floors and its
/// partition's index. `ARGV`: the channel releases are announced on (empty: no
/// announcement), then for each write fifteen values: the condition
/// (`vacant` or `version`), the RVN it expects, the lock (its field of the
/// fence floors and its member of the partition's index), its name across
/// partitions (what a release announces), the partition, whether there is a sort key
/// (`0`/`1`), the sort key, the owner, the new RVN, the lease in ms,
/// released (`0`/`1`), the fence (`next` or `keep`), the data update (`keep`,
/// `replace`, `clear`), the data, the expiry time (empty: none).
///
/// Only a released record is given its expiry (`EXPIREAT`): a held one
/// never vanishes on Redis's schedule, and an expired one leaves its fence
/// in the floors, so the next holder's fence is still higher.
///
/// Every condition, fence and permission (`redis.acl_check_cmd`, on Redis 7
/// and Valkey) is checked before anything is written: Redis keeps what a
/// script wrote before it failed, so a script may fail only before its first
/// write. Returns `{1, {record...}, now, node}` with each record as
/// written, or `{0, index, record, now, node}`: the first write whose
/// condition failed, and its current record (empty when absent); `node` is
/// the node's `run_id`, also written in each record (`n`). The new fence is
/// one more than the highest of the
/// record's and the fence floor, so a fence never repeats, even after the
/// record was deleted or expired; the floor is raised with it.
const PUT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Whose clock: an age is only computed on the node that stamped the record
-- (empty when this user may not run INFO: no age).
local info = redis.pcall('INFO', 'server')
local node = ''
if type(info) == 'string' then node = string.match(info, 'run_id:(%x+)') or '' end
local n = (#ARGV - 1) / 15
-- Everything that can refuse is decided before anything is written: a
-- script that fails half-way keeps what it wrote.
local function may(...)
  if redis.acl_check_cmd == nil then return end
  if not redis.acl_check_cmd(...) then
    local words = {...}
    error({err = 'NOPERM lock-redis: this user may not run ' .. words[1] .. ' on ' .. tostring(words[2])})
  end
end
local plans = {}
for i = 1, n do
  local a = 1 + (i - 1) * 15
  local record = KEYS[3 * i - 2]
  local floors = KEYS[3 * i - 1]
  local index = KEYS[3 * i]
  local current = redis.call('HGETALL', record)
  local fields = {}
  for j = 1, #current, 2 do fields[current[j]] = current[j + 1] end
  local exists = #current > 0
  local holds
  if ARGV[a + 1] == 'vacant' then
    holds = (not exists) or fields['x'] == '1'
  else
    holds = exists and fields['v'] == ARGV[a + 2]
  end
  if not holds then return {0, i - 1, current, now, node} end
  local previous = 0
  if exists then previous = tonumber(fields['f']) end
  local floor = tonumber(redis.call('HGET', floors, ARGV[a + 3]) or '0')
  local fence = previous
  if ARGV[a + 12] == 'next' then
    fence = math.max(previous, floor) + 1
    if fence > 9007199254740991 then
      error({err = 'ERR lock-redis: the fence of ' .. record .. ' would pass 2^53'})
    end
  end
  may('del', record)
  may('hset', record, 'f', '1')
  may('hset', floors, 'f', '1')
  may('zadd', index, '0', 'm')
  if ARGV[a + 11] == '1' and ARGV[a + 15] ~= '' then may('expireat', record, '1') end
  if ARGV[a + 11] == '1' and ARGV[1] ~= '' then may('publish', ARGV[1], 'm') end
  plans[i] = {fields = fields, fence = fence, floor = floor}
end
local written = {}
for i = 1, n do
  local a = 1 + (i - 1) * 15
  local record = KEYS[3 * i - 2]
  local floors = KEYS[3 * i - 1]
  local index = KEYS[3 * i]
  local fields = plans[i].fields
  local fence = plans[i].fence
  local data = nil
  if ARGV[a + 13] == 'keep' then data = fields['d'] elseif ARGV[a + 13] == 'replace' then data = ARGV[a + 14] end
  local new = {'p', ARGV[a + 5], 'o', ARGV[a + 8], 'v', ARGV[a + 9], 'l', ARGV[a + 10],
               'x', ARGV[a + 11], 'f', string.format('%d', fence), 't', string.format('%d', now)}
  if node ~= '' then new[#new + 1] = 'n'; new[#new + 1] = node end
  if ARGV[a + 6] == '1' then new[#new + 1] = 's'; new[#new + 1] = ARGV[a + 7] end
  if data then new[#new + 1] = 'd'; new[#new + 1] = data end
  if ARGV[a + 15] ~= '' then new[#new + 1] = 'e'; new[#new + 1] = ARGV[a + 15] end
  redis.call('DEL', record)
  redis.call('HSET', record, unpack(new))
  -- Only a released record may expire: its fence stays in the floors.
  if ARGV[a + 11] == '1' and ARGV[a + 15] ~= '' then redis.call('EXPIREAT', record, ARGV[a + 15]) end
  if fence > plans[i].floor then redis.call('HSET', floors, ARGV[a + 3], string.format('%d', fence)) end
  redis.call('ZADD', index, 0, ARGV[a + 3])
  if ARGV[a + 11] == '1' and ARGV[1] ~= '' then redis.call('PUBLISH', ARGV[1], ARGV[a + 4]) end
  written[i] = new
end
return {1, written, now, node}
"#;

/// A conditional delete of one lock. `KEYS`: the record, the partition's
/// fence floors, the partition's index. `ARGV`: the condition, the RVN it
/// expects, the lock's name across partitions (what is announced), the lock
/// (its field of the floors and member of the index), the channel releases
/// are announced on (empty: none). Returns `{1, record,
/// now, node}` with the record deleted, or `{0, record, now, node}` with the
/// current one (empty when absent). The lock's fence floor stays (every put
/// raised it to the record's fence): the next holder's fence is higher than
/// the deleted record's, which a holder paused across the deletion may still
/// present at a fenced resource.
const DELETE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Whose clock: an age is only computed on the node that stamped the record
-- (empty when this user may not run INFO: no age).
local info = redis.pcall('INFO', 'server')
local node = ''
if type(info) == 'string' then node = string.match(info, 'run_id:(%x+)') or '' end
local current = redis.call('HGETALL', KEYS[1])
local fields = {}
for j = 1, #current, 2 do fields[current[j]] = current[j + 1] end
local exists = #current > 0
local holds
if ARGV[1] == 'vacant' then holds = exists and fields['x'] == '1' else holds = exists and fields['v'] == ARGV[2] end
if not holds then return {0, current, now, node} end
-- Everything that can refuse is decided before anything is written.
if redis.acl_check_cmd ~= nil then
  local checks = {{'del', KEYS[1]}, {'zrem', KEYS[3], 'm'}}
  if ARGV[5] ~= '' then checks[#checks + 1] = {'publish', ARGV[5], 'm'} end
  for _, check in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(check)) then
      error({err = 'NOPERM lock-redis: this user may not run ' .. check[1] .. ' on ' .. check[2]})
    end
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[4])
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[3]) end
return {1, current, now, node}
"#;

/// Reads of records of one partition with the server's time. `KEYS`: the
/// partition's index, then the records. `ARGV`: each record's lock (its
/// member of the index). Returns `{now, node, record...}` (empty for an absent
/// one). A lock whose record is gone (expired) is taken out of the index, in
/// the same atomic step, so the index does not grow with locks that expired.
const READ: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Whose clock: an age is only computed on the node that stamped the record
-- (empty when this user may not run INFO: no age).
local info = redis.pcall('INFO', 'server')
local node = ''
if type(info) == 'string' then node = string.match(info, 'run_id:(%x+)') or '' end
local out = {now, node}
for i = 2, #KEYS do
  local current = redis.call('HGETALL', KEYS[i])
  if #current == 0 and ARGV[i - 1]
      and (redis.acl_check_cmd == nil or redis.acl_check_cmd('zrem', KEYS[1], ARGV[i - 1])) then
    redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
  out[#out + 1] = current
end
return out
"#;

/// A write that changes nothing, so that a `WAIT` after it proves the
/// replicas have everything the primary had when it ran: the record's RVN
/// written again, unchanged, if it still is `ARGV[1]`. `KEYS`: the record.
/// Returns 1 when written, 0 when the record no longer shows that RVN (then
/// nothing is written, and a `WAIT` would prove nothing).
const TOUCH: &str = r#"
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1])
return 1
"#;

/// The store's scripts, loaded once per server (`SCRIPT LOAD`) and then run
/// by their SHA1 (`EVALSHA`).
#[derive(Debug)]
pub(crate) struct Scripts {
    pub put: Script,
    pub delete: Script,
    pub read: Script,
    pub touch: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Self {
            put: Script::new(PUT),
            delete: Script::new(DELETE),
            read: Script::new(READ),
            touch: Script::new(TOUCH),
        }
    }
}
