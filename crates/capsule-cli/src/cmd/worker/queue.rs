//! `capsule worker`'s side of Redis (docs/scale-out.md): a connection that
//! comes back after Redis went away (with backoff, logged), and the
//! stream commands of a consumer group: read new jobs, claim those idle
//! too long on a dead consumer, keep a running job's entry fresh, post a
//! result and acknowledge the job in one transaction, dead-letter a job
//! delivered too often, and the statistics entry.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::{Client, Commands, Connection, RedisResult, Value};
use serde_json::{json, Value as Json};

/// The names a worker uses.
#[derive(Debug, Clone)]
pub struct Names {
    pub stream: String,
    pub group: String,
    pub consumer: String,
    pub results: String,
    pub dead: String,
}

impl Names {
    /// The list of deliveries of a job (by stream entry id), kept until it
    /// is acknowledged, for the dead-letter entry.
    pub fn history(&self, entry: &str) -> String {
        format!("{}:history:{entry}", self.stream)
    }

    /// The hash of the group's workers' statistics, one field per consumer.
    pub fn stats(&self) -> String {
        format!("{}:stats:{}", self.stream, self.group)
    }
}

/// How long a delivery history is kept without an acknowledgement.
const HISTORY_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// Backoff between reconnection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A connection to Redis, made on demand: an error drops it, and the next
/// use reconnects after a backoff that grows to [`BACKOFF_MAX`].
pub struct Link {
    client: Client,
    con: Option<Connection>,
    /// Who uses it, for the log.
    who: &'static str,
    backoff: Duration,
    /// Read timeout beyond the commands' own blocking time.
    read_timeout: Duration,
}

impl Link {
    pub fn new(client: Client, who: &'static str, read_timeout: Duration) -> Link {
        Link { client, con: None, who, backoff: Duration::ZERO, read_timeout }
    }

    /// Runs `f` on a connection; an error is logged and waits the backoff
    /// (`sleep`, which may end early) before it is returned; one of the
    /// connection drops it.
    pub fn with<T>(
        &mut self,
        sleep: &dyn Fn(Duration),
        f: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> Result<T, String> {
        let res = match &mut self.con {
            Some(c) => f(c),
            None => match self.connect() {
                Ok(mut c) => {
                    if self.backoff > Duration::ZERO {
                        eprintln!("capsule worker: {}: connected to Redis again", self.who);
                    }
                    let r = f(&mut c);
                    self.con = Some(c);
                    r
                }
                Err(e) => Err(e),
            },
        };
        match res {
            Ok(v) => {
                self.backoff = Duration::ZERO;
                Ok(v)
            }
            Err(e) => {
                // A server's error reply leaves the connection usable; it
                // is waited for all the same, so a caller that retries
                // never spins.
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.con = None;
                }
                self.backoff = (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
                eprintln!("capsule worker: {}: Redis: {e}; trying again in {:?}", self.who, self.backoff);
                sleep(self.backoff);
                Err(e.to_string())
            }
        }
    }

    fn connect(&self) -> RedisResult<Connection> {
        let c = self.client.get_connection_with_timeout(Duration::from_secs(5))?;
        c.set_read_timeout(Some(self.read_timeout))?;
        c.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }
}

/// Creates the consumer group (and the stream) unless it exists; from the
/// stream's start, so jobs added before any worker are done too.
pub fn ensure_group(c: &mut Connection, n: &Names) -> RedisResult<()> {
    let r: RedisResult<()> =
        redis::cmd("XGROUP").arg("CREATE").arg(&n.stream).arg(&n.group).arg("0").arg("MKSTREAM").query(c);
    match r {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// A job as delivered: its stream entry id, fields and delivery count.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub entry: String,
    pub fields: BTreeMap<String, Vec<u8>>,
    pub delivery: u64,
}

fn fields_of(s: &StreamId) -> BTreeMap<String, Vec<u8>> {
    s.map
        .iter()
        .map(|(k, v)| {
            let bytes = match v {
                Value::BulkString(b) => b.clone(),
                Value::SimpleString(s) => s.clone().into_bytes(),
                other => format!("{other:?}").into_bytes(),
            };
            (k.clone(), bytes)
        })
        .collect()
}

/// Up to `count` jobs never delivered before, waiting up to `block` for
/// one (None: only those already there).
pub fn read_new(c: &mut Connection, n: &Names, count: usize, block: Option<Duration>) -> RedisResult<Vec<Delivery>> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP").arg(&n.group).arg(&n.consumer).arg("COUNT").arg(count);
    if let Some(b) = block {
        cmd.arg("BLOCK").arg(b.as_millis() as u64);
    }
    let reply: Option<StreamReadReply> = cmd.arg("STREAMS").arg(&n.stream).arg(">").query(c)?;
    Ok(reply
        .into_iter()
        .flat_map(|r| r.keys)
        .flat_map(|k| k.ids)
        .map(|s| Delivery { entry: s.id.clone(), fields: fields_of(&s), delivery: 1 })
        .collect())
}

/// Claims up to `count` jobs pending longer than `idle` (their consumer
/// is gone: a live one keeps its jobs fresh), scanning the pending list
/// from `cursor`; returns them with their delivery counts (this delivery
/// included) and the cursor to go on from.
pub fn claim_idle(
    c: &mut Connection,
    n: &Names,
    idle: Duration,
    cursor: &str,
    count: usize,
) -> RedisResult<(Vec<Delivery>, String)> {
    let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
        .arg(&n.stream)
        .arg(&n.group)
        .arg(&n.consumer)
        .arg(idle.as_millis() as u64)
        .arg(cursor)
        .arg("COUNT")
        .arg(count)
        .query(c)?;
    let mut out = Vec::new();
    for s in &reply.claimed {
        // [[id, consumer, idle, deliveries]]
        let pending: Vec<(String, String, u64, u64)> =
            redis::cmd("XPENDING").arg(&n.stream).arg(&n.group).arg(&s.id).arg(&s.id).arg(1).query(c)?;
        let delivery = pending.first().map(|p| p.3).unwrap_or(1);
        out.push(Delivery { entry: s.id.clone(), fields: fields_of(s), delivery });
    }
    Ok((out, reply.next_stream_id))
}

/// Jobs pending on this consumer that it does not know of (`known`),
/// delivered less than `within` ago (by this process, not an earlier one
/// of the same name): their delivery's reply was lost (a connection cut
/// mid-reply, a read interrupted by a stop and continue). Returned with
/// their delivery counts, unchanged: they never ran. At most `count`.
pub fn orphans(
    c: &mut Connection,
    n: &Names,
    known: &std::collections::BTreeSet<String>,
    within: Duration,
    count: usize,
) -> RedisResult<Vec<Delivery>> {
    let pending: Vec<(String, String, u64, u64)> =
        redis::cmd("XPENDING").arg(&n.stream).arg(&n.group).arg("-").arg("+").arg(1000).arg(&n.consumer).query(c)?;
    let mut out = Vec::new();
    for (entry, _, idle, delivery) in pending {
        if out.len() == count || known.contains(&entry) || idle >= within.as_millis() as u64 {
            continue;
        }
        let found: redis::streams::StreamRangeReply = c.xrange(&n.stream, &entry, &entry)?;
        // An entry deleted from the stream meanwhile: nothing to run.
        if let Some(s) = found.ids.first() {
            out.push(Delivery { entry, fields: fields_of(s), delivery });
        }
    }
    Ok(out)
}

/// Whether the job is still pending (not yet acknowledged by anyone).
pub fn is_pending(c: &mut Connection, n: &Names, entry: &str) -> RedisResult<bool> {
    let p: Vec<(String, String, u64, u64)> =
        redis::cmd("XPENDING").arg(&n.stream).arg(&n.group).arg(entry).arg(entry).arg(1).query(c)?;
    Ok(!p.is_empty())
}

/// Hands back a job read ahead and never started: still this consumer's
/// (Redis has no other owner for it), but with its idle time set past
/// any `--claim-idle` (1 day, the most) so the next scan of any worker
/// claims it, and its delivery count set back so that claim counts as
/// the same delivery. Only if this consumer still holds it (a script, as
/// the heartbeat).
const HAND_BACK: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 1 then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'RETRYCOUNT', ARGV[5], 'JUSTID')
  return 1
end
return 0
";

pub fn hand_back(c: &mut Connection, n: &Names, d: &Delivery) -> RedisResult<i64> {
    let idle_ms = 24 * 3600 * 1000 + 1000;
    redis::Script::new(HAND_BACK)
        .key(&n.stream)
        .arg(&n.group)
        .arg(&n.consumer)
        .arg(&d.entry)
        .arg(idle_ms)
        .arg(d.delivery.saturating_sub(1))
        .invoke(c)
}

/// Records a delivery in the job's history.
pub fn record(c: &mut Connection, n: &Names, d: &Delivery) -> RedisResult<()> {
    let item = json!({"delivery": d.delivery, "worker": n.consumer, "at_ms": now_ms()}).to_string();
    let key = n.history(&d.entry);
    redis::pipe().rpush(&key, item).ignore().pexpire(&key, HISTORY_TTL_MS as i64).ignore().query(c)
}

/// The heartbeat: resets the idle time of those of `entries` this
/// consumer still owns (`XCLAIM ... JUSTID`, which does not count a
/// delivery), and only those: one another worker claimed is not taken
/// back. Atomic (a script).
const HEARTBEAT: &str = r"
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    n = n + 1
  end
end
return n
";

pub fn heartbeat(c: &mut Connection, n: &Names, entries: &[String]) -> RedisResult<i64> {
    let script = redis::Script::new(HEARTBEAT);
    let mut inv = script.key(&n.stream);
    inv.arg(&n.group).arg(&n.consumer);
    for e in entries {
        inv.arg(e);
    }
    inv.invoke(c)
}

/// Posts a job's result, then acknowledges the job (and drops its
/// history), in one transaction: a crash before it redelivers the job, one
/// after it lost nothing.
pub fn post(c: &mut Connection, n: &Names, d: &Delivery, job_id: &str, result: &Json) -> RedisResult<()> {
    let text = result.to_string();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("XADD")
        .arg(&n.results)
        .arg("*")
        .arg("id")
        .arg(job_id)
        .arg("entry")
        .arg(&d.entry)
        .arg("worker")
        .arg(&n.consumer)
        .arg("delivery")
        .arg(d.delivery)
        .arg("result")
        .arg(text)
        .ignore();
    acked(&mut pipe, n, d).query(c)
}

/// `pipe` then acknowledges the job and drops its delivery history (the
/// end of each transaction that settles a job).
fn acked<'a>(pipe: &'a mut redis::Pipeline, n: &Names, d: &Delivery) -> &'a mut redis::Pipeline {
    pipe.cmd("XACK").arg(&n.stream).arg(&n.group).arg(&d.entry).ignore().del(n.history(&d.entry)).ignore()
}

/// Moves a job delivered more than `max` times to the dead-letter stream
/// with its fields, how often it was delivered and its history, and
/// acknowledges it, in one transaction.
pub fn dead_letter(c: &mut Connection, n: &Names, d: &Delivery, max: u64) -> RedisResult<()> {
    let history: Vec<String> = c.lrange(n.history(&d.entry), 0, -1)?;
    let history: Vec<Json> = history.iter().filter_map(|h| serde_json::from_str(h).ok()).collect();
    let mut xadd = redis::cmd("XADD");
    xadd.arg(&n.dead).arg("*");
    for (k, v) in &d.fields {
        if !["entry", "deliveries", "history", "reason"].contains(&k.as_str()) {
            xadd.arg(k).arg(v);
        }
    }
    xadd.arg("entry")
        .arg(&d.entry)
        .arg("deliveries")
        .arg(d.delivery - 1)
        .arg("reason")
        .arg(format!("delivered {} times (--max-deliveries {max}) without a result", d.delivery - 1))
        .arg("history")
        .arg(Json::Array(history).to_string());
    let mut pipe = redis::pipe();
    pipe.atomic().add_command(xadd).ignore();
    acked(&mut pipe, n, d).query(c)
}

/// Writes this worker's statistics entry.
pub fn put_stats(c: &mut Connection, n: &Names, stats: &Json) -> RedisResult<()> {
    c.hset(n.stats(), &n.consumer, stats.to_string())
}

/// `capsule worker --stats`: the group's queue and every worker's entry,
/// with totals; an entry not refreshed for 3 heartbeats is `stale` (its
/// worker is gone or cut off).
pub fn read_stats(c: &mut Connection, n: &Names) -> RedisResult<Json> {
    let workers: BTreeMap<String, String> = c.hgetall(n.stats())?;
    let length: u64 = c.xlen(&n.stream)?;
    let results: u64 = c.xlen(&n.results)?;
    let dead: u64 = c.xlen(&n.dead)?;
    // XPENDING's summary: [count, first, last, consumers]; NOGROUP before
    // any worker made the group.
    let pending: RedisResult<Value> = redis::cmd("XPENDING").arg(&n.stream).arg(&n.group).query(c);
    let pending = match pending {
        Ok(Value::Array(v)) => v.first().and_then(|x| redis::from_redis_value::<u64>(x).ok()).unwrap_or(0),
        Ok(_) => 0,
        Err(e) if e.code() == Some("NOGROUP") => 0,
        Err(e) => return Err(e),
    };
    let now = now_ms();
    let mut total = json!({"done": 0, "running": 0, "failed": 0, "dead": 0, "statuses": {}});
    let mut list = serde_json::Map::new();
    for (name, text) in workers {
        let mut w: Json = serde_json::from_str(&text).unwrap_or_else(|_| json!({"unreadable": text}));
        let updated = w["updated_ms"].as_u64().unwrap_or(0);
        let beat = w["heartbeat_ms"].as_u64().unwrap_or(1000);
        let stopped = w["state"] == "stopped";
        w["stale"] = json!(!stopped && now.saturating_sub(updated) > 3 * beat);
        for k in ["done", "failed", "dead"] {
            total[k] = json!(total[k].as_u64().unwrap_or(0) + w[k].as_u64().unwrap_or(0));
        }
        if !stopped && w["stale"] == false {
            total["running"] = json!(total["running"].as_u64().unwrap_or(0) + w["running"].as_u64().unwrap_or(0));
        }
        if let Some(s) = w["statuses"].as_object() {
            for (k, v) in s {
                let t = &mut total["statuses"][k];
                *t = json!(t.as_u64().unwrap_or(0) + v.as_u64().unwrap_or(0));
            }
        }
        list.insert(name, w);
    }
    Ok(json!({
        "stream": n.stream,
        "group": n.group,
        "length": length,
        "pending": pending,
        "results": results,
        "dead": dead,
        "total": total,
        "workers": list,
    }))
}
