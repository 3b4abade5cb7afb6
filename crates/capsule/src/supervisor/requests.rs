//! The clients' requests and the answers to them: the binary protocol, JSON lines, an agent's command lines.

use std::os::fd::{AsRawFd, OwnedFd};

use serde_json::Value;

use crate::proto::lines::{self, Line, LineRequest};
use crate::proto::result::{InteractResult, RunResult, Side, Status};
use crate::proto::wire::{self, ClientMsg, ServerMsg};
use crate::sys::{self};

use super::*;

impl Loop {
    pub(crate) fn read_conn(&mut self, sup: &mut Supervisor, i: usize) {
        let Some(conn) = self.conns[i].as_mut() else { return };
        match conn.framing {
            Framing::Binary => match wire::recv::<ClientMsg>(conn.read.as_raw_fd()) {
                Ok(Some((msg, fds))) => self.binary_message(sup, i, msg, fds),
                Ok(None) => self.drop_conn(i),
                Err(e) => {
                    // Unreadable: nothing sensible can follow on this stream.
                    let _ = e;
                    self.drop_conn(i);
                }
            },
            Framing::Lines => {
                let mut buf = std::mem::take(&mut self.read_buf);
                buf.resize(64 << 10, 0);
                let read = sys::read(conn.read.as_raw_fd(), &mut buf);
                match read {
                    Ok(0) => {
                        conn.eof = true;
                        if let Some(Line::Complete(line)) = conn.lines.finish() {
                            self.line(sup, i, &line);
                        }
                        if !self.conns[i].as_ref().is_some_and(|c| c.finish_at_eof) {
                            self.drop_conn(i);
                        }
                    }
                    Ok(n) => {
                        conn.lines.push(&buf[..n]);
                        // A request may drop the connection (its client gone).
                        while let Some(line) = self.conns[i].as_mut().and_then(|c| c.lines.next_line()) {
                            match line {
                                Line::Complete(line) => self.line(sup, i, &line),
                                Line::TooLong => {
                                    self.write(i, lines::error_line(&Value::Null, &lines::too_long()));
                                }
                            }
                        }
                    }
                    Err(libc::EAGAIN) => {}
                    Err(_) => self.drop_conn(i),
                }
                self.read_buf = buf;
            }
        }
    }

    pub(crate) fn binary_message(&mut self, sup: &mut Supervisor, conn: usize, msg: ClientMsg, fds: Vec<OwnedFd>) {
        match msg {
            ClientMsg::Run { id, spec, stdio, notify } => {
                let mut fds = fds.into_iter();
                let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
                for (k, has) in stdio.iter().enumerate() {
                    if *has {
                        slots[k] = fds.next();
                    }
                }
                // The inherited descriptors only when all came (`enqueue` refuses the spec otherwise).
                let carried = fds.len() == spec.inherit_fds.len() + usize::from(notify);
                let n = if carried { spec.inherit_fds.len() } else { 0 };
                let inherit: Vec<OwnedFd> = fds.by_ref().take(n).collect();
                let notify = if notify { fds.next() } else { None };
                let cid = ClientId::Binary(id);
                if slots.iter().zip(stdio).any(|(s, has)| has && s.is_none()) {
                    let r = RunResult::error("the request announced more descriptors than it carried");
                    self.answer(conn, &cid, &r, notify);
                    return;
                }
                self.enqueue(
                    sup,
                    Request { conn, cid, spec, stdio: slots, inherit, notify, retried: false, pair: None },
                );
            }
            // Unknown ids are ignored: the run may just have ended.
            ClientMsg::Kill { id } => {
                self.control(conn, &ClientId::Binary(id), false);
            }
            ClientMsg::Cancel { id } => {
                self.control(conn, &ClientId::Binary(id), true);
            }
            ClientMsg::Interact { id, spec, stderr, notify } => {
                let mut fds = fds.into_iter();
                let stderr = stderr.map(|has| if has { fds.next() } else { None });
                let notify = if notify { fds.next() } else { None };
                self.enqueue_pair(sup, conn, ClientId::Binary(id), *spec, stderr, notify);
            }
            ClientMsg::Command { args, cwd, env } => self.command(sup, conn, &args, &cwd, &env, fds),
            ClientMsg::Session { id, req, notify } => {
                let mut fds = fds;
                if notify {
                    fds.pop();
                }
                self.session(sup, conn, ClientId::Binary(id), req, fds)
            }
            ClientMsg::Start(_) => {}
        }
    }

    /// A front end's command line (agents only): planned by the `capsule`
    /// command's own parser, then run as `capsule run` would have sent it.
    pub(crate) fn command(
        &mut self,
        sup: &mut Supervisor,
        conn: usize,
        args: &[String],
        cwd: &str,
        env: &[String],
        fds: Vec<OwnedFd>,
    ) {
        use crate::proto::spec::Stdio;
        let plan = match self.agent.as_ref().and_then(|a| a.planner) {
            Some(plan) if fds.len() == 3 => plan(args, std::path::Path::new(cwd)),
            _ => Planned::Decline,
        };
        let (mut spec, quiet) = match plan {
            // Options that choose another agent are declined by the
            // planner; a spec that still would is declined here.
            Planned::Run { spec, quiet } if spec.cgroup == sup.config.cgroup => (spec, quiet),
            Planned::Run { .. } | Planned::Decline => {
                if let Some(c) = self.conns.get(conn).and_then(Option::as_ref) {
                    if wire::send(c.read.as_raw_fd(), &ServerMsg::Declined, &[]).is_err() {
                        self.drop_conn(conn);
                    }
                }
                return;
            }
            Planned::Fail { error, quiet } => {
                return self.answer(conn, &ClientId::Command { quiet }, &RunResult::error(error), None);
            }
        };
        // The variables the run keeps are the caller's (as `client::start_once`).
        for k in std::mem::take(&mut spec.keep_env) {
            let value = env.iter().find_map(|e| {
                let (key, v) = capsule_nolibc::identity::split_env(e.as_bytes())?;
                (key == k.as_bytes()).then(|| String::from_utf8_lossy(v).into_owned())
            });
            if let Some(v) = value {
                spec.env.entry(k).or_insert(v);
            }
        }
        let cid = ClientId::Command { quiet };
        if let Err(e) = spec.validate() {
            return self.answer(conn, &cid, &RunResult::error(e.to_string()), None);
        }
        // The caller's streams, but where the supervisor carries one (a
        // capture, a read-once or write-once file).
        let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
        let own =
            [&spec.stdin, &spec.stdout, &spec.stderr].map(|io| !matches!(io, Some(Stdio::Capture(_) | Stdio::Pipe(_))));
        for (k, fd) in fds.into_iter().enumerate() {
            if own[k] {
                slots[k] = Some(fd);
            }
        }
        let inherit = Vec::new();
        self.enqueue(sup, Request { conn, cid, spec, stdio: slots, inherit, notify: None, retried: false, pair: None });
    }

    pub(crate) fn line(&mut self, sup: &mut Supervisor, conn: usize, line: &[u8]) {
        match lines::parse_line(line) {
            Err(e) => self.write(conn, lines::error_line(&e.id, &e.message)),
            Ok(LineRequest::Run { id, spec }) => {
                let cid = ClientId::Json(id.clone());
                if self.in_flight(conn, &cid) {
                    self.write(conn, lines::error_line(&id, lines::ID_IN_FLIGHT));
                    return;
                }
                self.enqueue(
                    sup,
                    Request {
                        conn,
                        cid,
                        spec,
                        stdio: [None, None, None],
                        inherit: Vec::new(),
                        notify: None,
                        retried: false,
                        pair: None,
                    },
                );
            }
            Ok(LineRequest::Interact { id, spec }) => {
                let cid = ClientId::Json(id.clone());
                if self.in_flight(conn, &cid) {
                    self.write(conn, lines::error_line(&id, lines::ID_IN_FLIGHT));
                    return;
                }
                self.enqueue_pair(sup, conn, cid, *spec, [None, None], None);
            }
            Ok(LineRequest::Cancel { id, target }) => {
                let found = self.control(conn, &ClientId::Json(target.clone()), true);
                self.write(conn, control_line(&id, &target, found));
            }
            Ok(LineRequest::Kill { id, target }) => {
                let found = self.control(conn, &ClientId::Json(target.clone()), false);
                self.write(conn, control_line(&id, &target, found));
            }
            Ok(LineRequest::Answer { id, answer }) => self.answer_ask(conn, &id, &answer),
            Ok(LineRequest::Session { id, req }) => self.session(sup, conn, ClientId::Json(id), req, Vec::new()),
        }
    }

    /// A client's answer to an ask: taken only from the connection whose
    /// run asked (a program in the sandbox has no way to it).
    pub(crate) fn answer_ask(&mut self, conn: usize, id: &Value, answer: &Value) {
        let (ask_id, decision) = match lines::parse_answer(answer) {
            Ok(x) => x,
            Err((ask_id, why)) => return self.write(conn, lines::answer_refused_line(id, ask_id, &why)),
        };
        let d = super::egress::Decision::parse(decision).expect("checked");
        let cid = ClientId::Json(id.clone());
        let run = self.running.iter().find(|r| r.req.conn == conn && r.req.cid == cid && !r.cancelled);
        let taken = match run.and_then(|r| r.proxy.as_ref()) {
            Some(px) => px.answer(ask_id, d),
            None => Err("no run with this id on this connection is asking"),
        };
        if let Err(why) = taken {
            self.write(conn, lines::answer_refused_line(id, Some(ask_id), why));
        }
    }

    /// Sends the proxies' asks to the clients of their runs; an ask no
    /// client can answer (its run is over, cancelled or not a JSON-lines
    /// run) is denied.
    pub(crate) fn send_asks(&mut self) {
        let Some(px) = &self.proxies else { return };
        for a in px.asks.take() {
            let Some(i) = self.running.iter().position(|r| r.proxy.as_ref().is_some_and(|p| p.key() == a.proxy)) else {
                continue;
            };
            let r = &self.running[i];
            match (&r.req.cid, r.cancelled || r.req.pair.is_some()) {
                (ClientId::Json(id), false) => {
                    let bytes = lines::ask_line(id, a.ask_id, &a.host, a.port, super::egress::via_name(a.via));
                    let conn = r.req.conn;
                    self.write(conn, bytes);
                }
                _ => {
                    if let Some(p) = &r.proxy {
                        let _ = p.answer(a.ask_id, super::egress::Decision::Deny);
                    }
                }
            }
        }
    }

    pub(crate) fn in_flight(&self, conn: usize, cid: &ClientId) -> bool {
        self.pairs.iter().any(|p| p.conn == conn && &p.cid == cid && !p.cancelled)
            || self.queue.iter().any(|q| q.conn == conn && &q.cid == cid && q.pair.is_none())
            || self.running.iter().any(|r| r.req.conn == conn && &r.req.cid == cid && !r.cancelled)
    }

    pub(crate) fn enqueue(&mut self, sup: &mut Supervisor, req: Request) {
        // Validated here, so a bad request is answered at once, not when
        // its turn comes.
        let carried = req.inherit.len() == req.spec.inherit_fds.len();
        let asks = req.spec.egress.as_ref().is_some_and(|e| e.ask);
        let json_lines = matches!(req.cid, ClientId::Json(_)) && req.pair.is_none();
        if asks && !json_lines {
            let msg =
                "egress.ask: only `capsule serve`'s JSON-lines clients answer asks (docs/protocol.md, \"Asks\"); \
                       not `capsule run`, the library or an interactive run"
                    .to_string();
            self.answer(req.conn, &req.cid, &RunResult::error(msg), req.notify);
            return;
        }
        if let Err(msg) = sup.check_request(&req.spec).and_then(|()| carried.then_some(()).ok_or_else(no_fds)) {
            let r = RunResult::error(msg);
            self.answer(req.conn, &req.cid, &r, req.notify);
            return;
        }
        if let Some(life) = &self.agent {
            life.mark_used();
        }
        self.queue.push_back(req);
    }

    /// Kill (`cancel` false) or cancel a run of `conn`; false if there is none.
    pub(crate) fn control(&mut self, conn: usize, cid: &ClientId, cancel: bool) -> bool {
        if let Some(k) = self.pairs.iter().position(|p| p.conn == conn && &p.cid == cid && !p.cancelled) {
            // An interactive run: both programs.
            let pair = self.pairs[k].id;
            if cancel {
                let p = &mut self.pairs[k];
                p.cancelled = true;
                let (cid, notify) = (p.cid.clone(), p.notify.take());
                self.answer_error(conn, &cid, "cancelled", notify);
            }
            for side in [Side::Solution, Side::Interactor] {
                let mut killed = RunResult::error("");
                killed.status = Status::Killed;
                killed.error = None;
                self.stop_pair_side(pair, side, killed);
            }
            return true;
        }
        if let Some(k) = self.queue.iter().position(|q| q.conn == conn && &q.cid == cid) {
            let req = self.queue.remove(k).expect("present");
            if cancel {
                self.answer_error(req.conn, &req.cid, "cancelled", req.notify);
            } else {
                let mut r = RunResult::error("");
                r.status = Status::Killed;
                r.error = None;
                self.answer(req.conn, &req.cid, &r, req.notify);
            }
            return true;
        }
        let Some(r) = self
            .running
            .iter_mut()
            .find(|r| r.req.conn == conn && &r.req.cid == cid && !r.cancelled && r.req.pair.is_none())
        else {
            return false;
        };
        sys::eventfd_signal(r.p.control.as_raw_fd());
        if cancel {
            r.cancelled = true;
            let (conn, cid, notify) = (r.req.conn, r.req.cid.clone(), r.req.notify.take());
            self.answer_error(conn, &cid, "cancelled", notify);
        }
        true
    }

    /// Sends a run's final message; closing `notify` wakes a poller.
    pub(crate) fn answer(&mut self, conn: usize, cid: &ClientId, result: &RunResult, notify: Option<OwnedFd>) {
        if let ClientId::Command { quiet } = cid {
            let code = result.exit_status().clamp(0, 255) as u8;
            let exit = ServerMsg::Exit { code, stderr: result.report(*quiet) };
            self.send_final(conn, cid, |_| exit, |_| Vec::new());
            drop(notify);
            return;
        }
        self.send_final(
            conn,
            cid,
            |id| {
                if result.status == Status::Error {
                    ServerMsg::Failed { id, error: result.error.clone().unwrap_or_default() }
                } else {
                    ServerMsg::Result { id, result: Box::new(result.clone()) }
                }
            },
            |id| lines::result_line(id, result),
        );
        drop(notify);
    }

    /// Sends an interactive run's final message.
    pub(crate) fn answer_pair(
        &mut self,
        conn: usize,
        cid: &ClientId,
        result: &InteractResult,
        notify: Option<OwnedFd>,
    ) {
        self.send_final(
            conn,
            cid,
            |id| ServerMsg::Interacted { id, result: Box::new(result.clone()) },
            |id| lines::interact_line(id, result),
        );
        drop(notify);
    }

    /// Sends a request's final message in its connection's framing.
    pub(crate) fn send_final(
        &mut self,
        conn: usize,
        cid: &ClientId,
        binary: impl FnOnce(u64) -> ServerMsg,
        line: impl FnOnce(&Value) -> Vec<u8>,
    ) {
        self.answered += 1;
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        if c.gone {
            return;
        }
        let sent = match (&c.framing, cid) {
            (Framing::Binary, ClientId::Binary(id)) => wire::send(c.read.as_raw_fd(), &binary(*id), &[]),
            (Framing::Binary, ClientId::Command { .. }) => wire::send(c.read.as_raw_fd(), &binary(0), &[]),
            (_, ClientId::Json(id)) => {
                let bytes = line(id);
                return self.write(conn, bytes);
            }
            _ => return,
        };
        if sent.is_err() {
            self.drop_conn(conn);
        }
    }

    pub(crate) fn answer_error(&mut self, conn: usize, cid: &ClientId, msg: &str, notify: Option<OwnedFd>) {
        self.answer(conn, cid, &RunResult::error(msg), notify);
    }

    /// Queues `data` for a JSON-lines client and writes what it can.
    pub(crate) fn write(&mut self, conn: usize, data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        if c.gone {
            return;
        }
        c.out.extend_from_slice(&data);
        self.flush(conn);
    }

    pub(crate) fn flush(&mut self, conn: usize) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        while !c.out.is_empty() {
            match sys::write(c.wfd(), &c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(libc::EAGAIN) => return,
                Err(_) => {
                    self.drop_conn(conn);
                    return;
                }
            }
        }
    }

    /// The client is gone: kill its runs, drop its queued requests.
    pub(crate) fn drop_conn(&mut self, conn: usize) {
        if let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) {
            c.gone = true;
            c.eof = true;
            c.out.clear();
        }
        self.queue.retain(|q| q.conn != conn);
        self.session_client_gone(conn);
        for p in self.pairs.iter_mut().filter(|p| p.conn == conn) {
            p.cancelled = true;
        }
        for r in self.running.iter_mut().filter(|r| r.req.conn == conn) {
            r.cancelled = true;
            kill_prepared(&mut r.p);
        }
        // The binary protocol has one client per supervisor (an agent's
        // clients aside): without it, nobody is left to serve.
        if self.agent.is_none()
            && self.conns.get(conn).and_then(Option::as_ref).is_some_and(|c| matches!(c.framing, Framing::Binary))
        {
            self.stop = true;
        }
        if self.conns.get(conn).and_then(Option::as_ref).is_some_and(|c| c.write.is_none() && !c.finish_at_eof) {
            self.conns[conn] = None;
        }
    }

    /// Kills everything still running or prepared and waits for it.
    pub(crate) fn shutdown(&mut self) {
        for mut r in self.running.drain(..) {
            kill_prepared(&mut r.p);
            self.zombies.push(bury(r.p));
        }
        for mut s in self.spares.drain(..) {
            kill_prepared(&mut s);
            self.zombies.push(bury(s));
        }
        for mut z in self.zombies.drain(..) {
            z.settle_now();
            if let Some(fd) = z.pidfd() {
                let _ = sys::pidfd_wait(fd);
            }
            z.reaped = true;
            if let Some(cg) = z.cgroup.take() {
                cg.remove();
            }
        }
    }
}

pub(crate) use lines::control_line;

/// A spec naming `inherit_fds` that came without them.
fn no_fds() -> String {
    "invalid spec: inherit_fds names descriptors the request did not carry: only the one-shot client \
     (`capsule isolate --inherit-fds`) passes the caller's descriptors; JSON requests cannot carry any"
        .into()
}
