//! The language presets (`capsule presets`, `capsule::presets`), as the
//! unprivileged test user: for every language whose toolchain works here, a
//! hello world and a small solution (the sum of the numbers on stdin)
//! compiled and run through the preset's specs (`capsule presets NAME
//! --compile|--run --box DIR`, a TOML profile, then `capsule run
//! --profile`), a compile error that fails the compile, and the language
//! policies: Java's threads and /proc/self, Go's threads, Python's
//! ioctl(FIOCLEX) and threads, bash's pipelines, and what each forbids.
//!
//! A language whose toolchain is missing skips (a failure under
//! CAPSULE_TEST_STRICT=1: CI installs all eight).

use capsule_testkit as common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;

/// `capsule presets --json` as the test user, once.
fn listing() -> &'static serde_json::Value {
    static L: OnceLock<serde_json::Value> = OnceLock::new();
    L.get_or_init(|| {
        let out = capsule(&["presets", "--json"]).run();
        assert!(out.code == Some(0) || out.code == Some(1), "{}", out.describe());
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("presets --json: {e}; {}", out.describe()))
    })
}

/// Whether the preset's toolchain works for the test user.
fn available(lang: &str) -> Result<(), String> {
    let entry = listing()
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == lang))
        .unwrap_or_else(|| panic!("`{lang}` is not in capsule presets --json: {}", listing()));
    if entry["ok"] == true {
        Ok(())
    } else {
        Err(format!("the {lang} toolchain does not work here: {}", entry["error"]))
    }
}

fn source_name(lang: &str) -> &'static str {
    match lang {
        "c" => "solution.c",
        "cpp" => "solution.cpp",
        "rust" => "solution.rs",
        "pascal" => "solution.pas",
        "python3" => "solution.py",
        "bash" => "solution.sh",
        "java" => "Main.java",
        "go" => "solution.go",
        _ => unreachable!("{lang}"),
    }
}

/// A box directory (owned by the test user) holding `source` under the
/// preset's source name, and a directory for its specs and input.
struct Sub {
    lang: &'static str,
    dir: Scratch,
    aux: Scratch,
}

impl Sub {
    fn new(lang: &'static str, source: &str) -> Sub {
        let dir = Scratch::new(&format!("preset-{lang}"));
        dir.write(source_name(lang), source.as_bytes());
        Sub { lang, dir, aux: Scratch::new(&format!("preset-{lang}-aux")) }
    }

    /// `capsule presets LANG --STEP --box DIR EXTRA...`, written to a file.
    fn spec(&self, step: &str, extra: &[&str]) -> PathBuf {
        let flag = format!("--{step}");
        let mut c = capsule(&["presets", self.lang, &flag, "--box", &self.dir.s()]);
        let out = c.args(extra).run();
        out.assert_code(0);
        assert!(out.stdout.contains("cwd = \"/box\""), "{}", out.describe());
        self.aux.write(&format!("{step}.toml"), out.stdout.as_bytes())
    }

    /// Compiles the source in the sandbox.
    fn compile(&self) -> Out {
        let spec = self.spec("compile", &[]);
        capsule(&["run", "-q", "--profile", &spec.display().to_string()]).json().run()
    }

    /// Runs the compiled program with `input` on stdin.
    fn run(&self, input: &str, memory: Option<&str>) -> Out {
        let spec = match memory {
            Some(m) => self.spec("run", &["--memory", m]),
            None => self.spec("run", &[]),
        };
        let inp = self.aux.write("input.txt", input.as_bytes());
        capsule(&["run", "-q", "--profile", &spec.display().to_string(), "--stdin", &inp.display().to_string()])
            .json()
            .run()
    }

    /// What the compile leaves in the box when it succeeds.
    fn binary(&self) -> Option<PathBuf> {
        match self.lang {
            "python3" | "bash" => None,
            "java" => Some(self.dir.join("Main.class")),
            _ => Some(self.dir.join("solution")),
        }
    }
}

#[track_caller]
fn assert_exited(out: &Out, code: i32) {
    assert_eq!(out.status(), "exited", "{}", out.describe());
    assert_eq!(out.json()["exit_code"], code, "{}", out.describe());
}

#[track_caller]
fn assert_forbidden(out: &Out) -> String {
    assert_eq!(out.status(), "forbidden-syscall", "{}", out.describe());
    out.json()["syscall"].as_str().unwrap_or_else(|| panic!("no syscall; {}", out.describe())).to_string()
}

/// Compiles `source` and asserts it worked.
#[track_caller]
fn compiled(lang: &'static str, source: &str) -> Sub {
    let sub = Sub::new(lang, source);
    let out = sub.compile();
    assert_exited(&out, 0);
    if let Some(b) = sub.binary() {
        assert!(b.exists(), "{} missing after the compile; {}", b.display(), out.describe());
    }
    sub
}

const INPUT: &str = "1000000000000 2 3\n4 5\n";
const SUM: &str = "1000000000014\n";

/// Hello world, the sum of the numbers on stdin, and a compile error.
fn hello_sum_error(lang: &'static str, hello: &str, sum: &str, broken: &str, says: &str) {
    let test = format!("preset_{lang}");
    require!(&test, userns_available());
    require!(&test, available(lang));
    let sub = compiled(lang, hello);
    let out = sub.run("", None);
    assert_exited(&out, 0);
    assert_eq!(out.stdout, "Hello, world!\n", "{}", out.describe());

    let sub = compiled(lang, sum);
    let out = sub.run(INPUT, Some("256M"));
    assert_exited(&out, 0);
    assert_eq!(out.stdout, SUM, "{}", out.describe());

    let sub = Sub::new(lang, broken);
    let out = sub.compile();
    assert_eq!(out.status(), "exited", "{}", out.describe());
    let code = out.json()["exit_code"].as_i64().unwrap_or_else(|| panic!("{}", out.describe()));
    assert_ne!(code, 0, "a compile error must fail the compile; {}", out.describe());
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains(says), "the compiler's message (`{says}`) is missing; {}", out.describe());
    if let Some(b) = sub.binary() {
        assert!(!b.exists(), "{} left by a failed compile", b.display());
    }
}

#[test]
fn preset_c() {
    hello_sum_error(
        "c",
        "#include <stdio.h>\nint main(void) { puts(\"Hello, world!\"); return 0; }\n",
        "#include <stdio.h>\nint main(void) { long a, s = 0; while (scanf(\"%ld\", &a) == 1) s += a; printf(\"%ld\\n\", s); return 0; }\n",
        "int main(void) { return }\n",
        "error",
    );
}

#[test]
fn preset_cpp() {
    hello_sum_error(
        "cpp",
        "#include <iostream>\nint main() { std::cout << \"Hello, world!\" << std::endl; }\n",
        "#include <bits/stdc++.h>\nint main() { std::ios::sync_with_stdio(false); long long a, s = 0; std::vector<long long> v; while (std::cin >> a) v.push_back(a); std::sort(v.begin(), v.end()); for (auto x : v) s += x; std::cout << s << '\\n'; }\n",
        "#include <vector>\nint main() { std::vector<int> v = 1; }\n",
        "error",
    );
}

#[test]
fn preset_rust() {
    hello_sum_error(
        "rust",
        "fn main() { println!(\"Hello, world!\"); }\n",
        "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let t: i64 = s.split_whitespace().map(|x| x.parse::<i64>().unwrap()).sum(); println!(\"{}\", t); }\n",
        "fn main() { let x: i32 = \"no\"; }\n",
        "mismatched types",
    );
}

#[test]
fn preset_pascal() {
    hello_sum_error(
        "pascal",
        "program hello;\nbegin\n  writeln('Hello, world!');\nend.\n",
        "program sum;\nvar a, s: int64;\nbegin\n  s := 0;\n  while not seekeof(input) do begin read(a); s := s + a; end;\n  writeln(s);\nend.\n",
        "program bad;\nbegin\n  x := ;\nend.\n",
        "Error",
    );
}

#[test]
fn preset_python3() {
    hello_sum_error(
        "python3",
        "print(\"Hello, world!\")\n",
        "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n",
        "print(\"unclosed\"\n",
        "SyntaxError",
    );
}

#[test]
fn preset_bash() {
    hello_sum_error(
        "bash",
        "echo \"Hello, world!\"\n",
        "s=0\nwhile read -r line; do for x in $line; do s=$((s + x)); done; done\necho \"$s\"\n",
        "if true; then\n  echo x\n",
        "syntax error",
    );
}

#[test]
fn preset_java() {
    hello_sum_error(
        "java",
        "public class Main { public static void main(String[] a) { System.out.println(\"Hello, world!\"); } }\n",
        "import java.io.*;\nimport java.util.*;\npublic class Main { public static void main(String[] a) throws IOException { BufferedReader r = new BufferedReader(new InputStreamReader(System.in)); long s = 0; String l; while ((l = r.readLine()) != null) { StringTokenizer t = new StringTokenizer(l); while (t.hasMoreTokens()) s += Long.parseLong(t.nextToken()); } System.out.println(s); } }\n",
        "public class Main { public static void main(String[] a) { int x = \"no\"; } }\n",
        "error:",
    );
}

#[test]
fn preset_go() {
    hello_sum_error(
        "go",
        "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"Hello, world!\") }\n",
        "package main\n\nimport (\n\t\"bufio\"\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tin := bufio.NewReader(os.Stdin)\n\tvar s, x int64\n\tfor {\n\t\tif _, err := fmt.Fscan(in, &x); err != nil {\n\t\t\tbreak\n\t\t}\n\t\ts += x\n\t}\n\tfmt.Println(s)\n}\n",
        "package main\n\nfunc main() { var x int = \"no\"; _ = x }\n",
        "cannot use",
    );
}

/// The strict policy of a native run: a socket is a forbidden call.
#[test]
fn preset_c_run_forbids_socket() {
    require!("preset_c_run_forbids_socket", userns_available());
    require!("preset_c_run_forbids_socket", available("c"));
    let sub = compiled(
        "c",
        "#include <stdio.h>\n#include <sys/socket.h>\nint main(void) { printf(\"before\\n\"); fflush(stdout); int s = socket(AF_INET, SOCK_STREAM, 0); printf(\"socket=%d\\n\", s); return 0; }\n",
    );
    let out = sub.run("", None);
    assert_eq!(assert_forbidden(&out), "socket", "{}", out.describe());
    assert_eq!(out.json()["syscall_args"][0], 2, "AF_INET; {}", out.describe());
    assert_eq!(out.stdout, "before\n", "the call never ran; {}", out.describe());
}

/// Java: threads (with a 64 MiB stack for deep recursion), /proc/self,
/// Scanner and parallel streams work; -Xmx follows the memory limit; a
/// process is forbidden.
#[test]
fn preset_java_threads_and_proc_self() {
    require!("preset_java_threads_and_proc_self", userns_available());
    require!("preset_java_threads_and_proc_self", available("java"));
    let sub = compiled(
        "java",
        r#"import java.nio.file.*;
import java.util.*;
import java.util.stream.*;
public class Main {
    static long depth(long n) { return n >= 100000 ? n : depth(n + 1); }
    public static void main(String[] args) throws Exception {
        Scanner sc = new Scanner(System.in);
        long s = 0;
        while (sc.hasNextLong()) s += sc.nextLong();
        long[] acc = new long[8];
        Thread[] ts = new Thread[8];
        for (int i = 0; i < 8; i++) {
            final int k = i;
            ts[i] = new Thread(null, () -> { acc[k] = depth(0); }, "worker-" + i, 1 << 26);
            ts[i].start();
        }
        String during = new String(Files.readAllBytes(Paths.get("/proc/self/status")));
        for (Thread t : ts) t.join();
        long tasks;
        try (Stream<Path> p = Files.list(Paths.get("/proc/self/task"))) { tasks = p.count(); }
        System.out.println("sum=" + s);
        System.out.println("threads_ok=" + Arrays.stream(acc).allMatch(x -> x == 100000));
        System.out.println("proc_status=" + during.contains("Threads:"));
        System.out.println("tasks=" + tasks);
        System.out.println("parallel=" + IntStream.range(0, 100000).parallel().sum());
        System.out.println("max_heap_mib=" + Runtime.getRuntime().maxMemory() / (1 << 20));
    }
}
"#,
    );
    let out = sub.run(INPUT, Some("256M"));
    assert_exited(&out, 0);
    let kv = out.kv();
    assert_eq!(kv.get("sum"), Some(SUM.trim()), "{}", out.describe());
    assert_eq!(kv.get("threads_ok"), Some("true"), "{}", out.describe());
    assert_eq!(kv.get("proc_status"), Some("true"), "{}", out.describe());
    assert_eq!(kv.get("parallel"), Some("704982704"), "{}", out.describe());
    let tasks: u32 = kv.must("tasks").parse().unwrap();
    assert!(tasks >= 5, "the JVM's own threads are in /proc/self/task: {tasks}; {}", out.describe());
    // -Xmx192m for 256M: the JVM reports a little less (survivor space).
    let heap: u64 = kv.must("max_heap_mib").parse().unwrap();
    assert!((150..=192).contains(&heap), "max heap {heap} MiB for a 256M limit; {}", out.describe());

    let sub = compiled(
        "java",
        "public class Main { public static void main(String[] a) throws Exception { System.out.println(\"before\"); new ProcessBuilder(\"/bin/true\").start().waitFor(); System.out.println(\"spawned\"); } }\n",
    );
    let out = sub.run("", None);
    let call = assert_forbidden(&out);
    assert!(!out.stdout.contains("spawned"), "{call}; {}", out.describe());
}

/// Go: goroutines on eight OS threads at once, GOMEMLIMIT from the memory
/// limit; os/exec is forbidden.
#[test]
fn preset_go_threads() {
    require!("preset_go_threads", userns_available());
    require!("preset_go_threads", available("go"));
    let sub = compiled(
        "go",
        r#"package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	var n int32
	var wg sync.WaitGroup
	tids := make([]int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			// Each goroutine holds its own thread until all eight run.
			runtime.LockOSThread()
			tids[k] = syscall.Gettid()
			atomic.AddInt32(&n, 1)
			for atomic.LoadInt32(&n) < 8 {
				runtime.Gosched()
			}
		}(i)
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, t := range tids {
		seen[t] = true
	}
	time.Sleep(20 * time.Millisecond)
	fmt.Printf("threads=%d\nmemlimit=%d\n", len(seen), debug.SetMemoryLimit(-1))
}
"#,
    );
    let out = sub.run("", Some("100M"));
    assert_exited(&out, 0);
    let kv = out.kv();
    assert_eq!(kv.get("threads"), Some("8"), "{}", out.describe());
    assert_eq!(kv.get("memlimit"), Some(((100u64 << 20) / 10 * 9).to_string().as_str()), "{}", out.describe());

    let sub = compiled(
        "go",
        "package main\n\nimport (\n\t\"fmt\"\n\t\"os/exec\"\n)\n\nfunc main() {\n\tfmt.Println(\"before\")\n\terr := exec.Command(\"/bin/true\").Run()\n\tfmt.Println(\"spawned\", err)\n}\n",
    );
    let out = sub.run("", None);
    let call = assert_forbidden(&out);
    assert!(!out.stdout.contains("spawned"), "{call}; {}", out.describe());
}

/// Python: ioctl(FIOCLEX) (os.set_inheritable), a thread with a big stack
/// for deep recursion; fork is forbidden.
#[test]
fn preset_python_fioclex_and_threads() {
    require!("preset_python_fioclex_and_threads", userns_available());
    require!("preset_python_fioclex_and_threads", available("python3"));
    let sub = compiled(
        "python3",
        r#"import os, sys, threading
fd = os.open("solution.py", os.O_RDONLY)
os.set_inheritable(fd, True)
os.set_inheritable(fd, False)
print("inheritable=%s" % os.get_inheritable(fd))
sys.setrecursionlimit(10**6)
threading.stack_size(1 << 26)
def depth(n):
    return n if n >= 50000 else depth(n + 1)
r = []
t = threading.Thread(target=lambda: r.append(depth(0)))
t.start(); t.join()
print("depth=%d" % r[0])
print("sum=%d" % sum(map(int, sys.stdin.read().split())))
"#,
    );
    let out = sub.run(INPUT, None);
    assert_exited(&out, 0);
    let kv = out.kv();
    assert_eq!(kv.get("inheritable"), Some("False"), "{}", out.describe());
    assert_eq!(kv.get("depth"), Some("50000"), "{}", out.describe());
    assert_eq!(kv.get("sum"), Some(SUM.trim()), "{}", out.describe());

    let sub = compiled("python3", "import os\nprint('before', flush=True)\nos.fork()\nprint('forked')\n");
    let out = sub.run("", None);
    assert_eq!(assert_forbidden(&out), "clone", "{}", out.describe());
    assert_eq!(out.stdout, "before\n", "{}", out.describe());
}

/// bash: pipelines, command substitutions, here-documents and commands of
/// /usr/bin; a TCP connection (/dev/tcp) is forbidden.
#[test]
fn preset_bash_pipelines() {
    require!("preset_bash_pipelines", userns_available());
    require!("preset_bash_pipelines", available("bash"));
    let sub = compiled(
        "bash",
        r#"read -r a b c
echo "first=$((a + b + c))"
echo "top=$(seq 1 5 | sort -rn | head -2 | awk '{s += $1} END {print s}')"
n=$(cat <<END | grep -c line
line1
line2
END
)
echo "heredoc=$n"
t=$(mktemp); echo kept > "$t"; echo "tmp=$(cat "$t")"; rm "$t"
"#,
    );
    let out = sub.run(INPUT, None);
    assert_exited(&out, 0);
    let kv = out.kv();
    assert_eq!(kv.get("first"), Some("1000000000005"), "{}", out.describe());
    assert_eq!(kv.get("top"), Some("9"), "{}", out.describe());
    assert_eq!(kv.get("heredoc"), Some("2"), "{}", out.describe());
    assert_eq!(kv.get("tmp"), Some("kept"), "{}", out.describe());

    let sub = compiled("bash", "echo before\nexec 3<>/dev/tcp/127.0.0.1/80\necho connected\n");
    let out = sub.run("", None);
    assert_eq!(assert_forbidden(&out), "socket", "{}", out.describe());
    assert_eq!(out.stdout, "before\n", "{}", out.describe());
}

/// `capsule presets`: every preset, in order, works or says why not; the
/// text listing agrees with the JSON and the exit status with both.
#[test]
fn presets_list() {
    let list = listing().as_array().expect("a list");
    let names: Vec<&str> = list.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c", "cpp", "rust", "pascal", "python3", "bash", "java", "go"]);
    for e in list {
        let name = e["name"].as_str().unwrap();
        assert_eq!(e["source"], source_name(name));
        if e["ok"] == true {
            assert!(e["version"].as_str().is_some_and(|v| !v.is_empty()), "{e}");
            assert!(e["program"].as_str().is_some_and(|p| p.starts_with('/')), "{e}");
            assert!(e["error"].is_null(), "{e}");
        } else {
            let err = e["error"].as_str().unwrap_or_else(|| panic!("{e}"));
            assert!(err.contains(&format!("preset `{name}`")) && err.contains("to fix:"), "{err}");
        }
    }
    let out = capsule(&["presets"]).run();
    let all_ok = list.iter().all(|e| e["ok"] == true);
    out.assert_code(if all_ok { 0 } else { 1 });
    for e in list {
        let name = e["name"].as_str().unwrap();
        let line = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name}; {}", out.describe()));
        if e["ok"] == true {
            assert!(line.contains(" ok ") && line.contains(e["version"].as_str().unwrap()), "{line}");
        } else {
            assert!(line.contains(" missing "), "{line}");
        }
    }
    // Aliases, and a name that is none.
    let out = capsule(&["presets", "c++", "py", "--json"]).run();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}; {}", out.describe()));
    assert_eq!(v[0]["name"], "cpp");
    assert_eq!(v[1]["name"], "python3");
    let out = capsule(&["presets", "cobol"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("unknown language `cobol`") && out.stderr.contains("python3"), "{}", out.describe());
    let out = capsule(&["presets", "c", "cpp", "--compile", "--box", "/tmp"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("exactly one"), "{}", out.describe());
}

/// Without cgroups (or asked to leave them out) the compile spec has no
/// memory or CPU bandwidth limit but keeps its process limit; a missing
/// box directory is an error.
#[test]
fn presets_compile_spec_without_cgroups() {
    require!("presets_compile_spec_without_cgroups", available("bash"));
    let dir = Scratch::new("preset-nocg");
    let out = capsule(&["presets", "bash", "--compile", "--box", &dir.s(), "--no-cgroups"]).run();
    out.assert_code(0);
    assert!(!out.stdout.contains("memory =") && !out.stdout.contains("cpu_bandwidth ="), "{}", out.describe());
    assert!(out.stdout.contains("pids = 4") && out.stdout.contains("wall_time = \"30s\""), "{}", out.describe());
    assert!(out.stdout.contains(&format!("src = \"{}\"\ndst = \"/box\"", dir.s())), "{}", out.describe());
    let out = capsule(&["presets", "bash", "--run", "--box", &dir.join("nothing").display().to_string()]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("not a directory"), "{}", out.describe());
}

/// A rustc first in PATH whose sysroot this user cannot read (rustup's
/// under a 0700 /root) is passed over with the reason; the next usable
/// rustc is taken, or, when there is none, the error names it.
#[test]
fn presets_unreadable_rust_sysroot_is_reported() {
    require!("presets_unreadable_rust_sysroot_is_reported", require_root());
    let hidden = PathBuf::from(SCRATCH_ROOT).join(unique("root-only"));
    std::fs::create_dir_all(hidden.join("toolchain/bin")).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    let bin = Scratch::new("fake-rustc");
    let fake = bin.write(
        "rustc",
        format!("#!/bin/sh\n[ \"$1\" = --print ] && echo {}/toolchain && exit 0\nexit 1\n", hidden.display())
            .as_bytes(),
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = capsule(&["presets", "rust", "--json"]).env("PATH", &format!("{}:{DEFAULT_PATH}", bin.s())).run();
    let _ = std::fs::remove_dir_all(&hidden);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}; {}", out.describe()));
    let e = &v[0];
    let said = if e["ok"] == true {
        out.assert_code(0);
        assert_ne!(e["program"].as_str(), Some(fake.to_str().unwrap()), "{e}");
        e["skipped"][0].as_str().unwrap_or_else(|| panic!("the fake rustc is not reported: {e}")).to_string()
    } else {
        out.assert_code(1);
        e["error"].as_str().unwrap().to_string()
    };
    assert!(said.contains(&fake.display().to_string()), "{said}");
    assert!(said.contains(&format!("{}/toolchain", hidden.display())) && said.contains("EACCES"), "{said}");
    if e["ok"] != true {
        assert!(said.contains("apt-get install rustc"), "{said}");
    }
}

/// The box is read-only for the run: the program cannot change its own
/// files (Landlock and the read-only bind; under strict the open is
/// forbidden before either).
#[test]
fn preset_run_box_is_read_only() {
    require!("preset_run_box_is_read_only", userns_available());
    require!("preset_run_box_is_read_only", available("bash"));
    let source = "echo changed 2>/dev/null > solution.sh && echo wrote || echo refused\n";
    let sub = compiled("bash", source);
    let out = sub.run("", None);
    assert_exited(&out, 0);
    assert_eq!(out.stdout, "refused\n", "{}", out.describe());
    let kept = std::fs::read_to_string(sub.dir.join("solution.sh")).unwrap();
    assert_eq!(kept, source, "the source was changed");
}
