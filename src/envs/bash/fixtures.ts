/**
 * The file trees of the bash suite. NL2Bash's execution tasks (from InterCode) run over three file
 * systems — `/testbed`, `/system` and `/workspace` — whose contents were not published; these trees
 * are ours, built so that the tasks' reference commands have something to act on: the folders, file
 * names, extensions, words, sizes, permissions and ages the commands mention.
 *
 * Every tree is the same on every build (contents are fixed; ages are relative to the build time), so
 * the agent's and the reference command's runs start from identical trees. This file only describes
 * trees; building and comparing them is src/sandbox/tree.ts.
 */
import { gzipSync } from "node:zlib";
import type { TreeNode } from "../../sandbox/index.js";

export type FileSystemName = "testbed" | "system" | "workspace";

export interface FileSystemSpec {
  name: FileSystemName;
  /** Where the tree is mounted in the sandbox (also the working directory). */
  mountPoint: string;
  nodes: TreeNode[];
}

const MIN = 60;
const HOUR = 3600;
const DAY = 86_400;

function file(path: string, content: string | Buffer, ageSeconds = 2 * HOUR, mode = 0o644): TreeNode {
  return { path, kind: "file", content, ageSeconds, mode };
}
function dir(path: string, ageSeconds = 2 * HOUR, mode = 0o755): TreeNode {
  return { path, kind: "dir", ageSeconds, mode };
}

/** Deterministic text: `n` lines drawn from a word list by a simple counter. */
function prose(seed: number, lines: number, words = 8): string {
  const vocab = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"];
  let x = seed * 7 + 3;
  const out: string[] = [];
  for (let i = 0; i < lines; i++) {
    const line: string[] = [];
    for (let j = 0; j < words; j++) {
      x = (x * 1103515245 + 12345) % 2147483648;
      line.push(vocab[x % vocab.length]!);
    }
    out.push(line.join(" "));
  }
  return out.join("\n") + "\n";
}

/** A POSIX ustar archive of the given files (fixed owner and times), for `.tar.gz` fixtures. */
export function ustar(files: Array<{ name: string; content: string }>, mtime = 1_600_000_000): Buffer {
  const blocks: Buffer[] = [];
  for (const f of files) {
    const body = Buffer.from(f.content);
    const header = Buffer.alloc(512, 0);
    const put = (text: string, offset: number, length: number) => header.write(text.slice(0, length), offset, length, "ascii");
    const octal = (n: number, length: number) => n.toString(8).padStart(length - 1, "0") + "\0";
    put(f.name, 0, 100);
    put(octal(0o644, 8), 100, 8);
    put(octal(0, 8), 108, 8);
    put(octal(0, 8), 116, 8);
    put(octal(body.length, 12), 124, 12);
    put(octal(mtime, 12), 136, 12);
    header.fill(0x20, 148, 156);
    put("0", 156, 1);
    put("ustar\0", 257, 6);
    put("00", 263, 2);
    put("root", 265, 32);
    put("root", 297, 32);
    let sum = 0;
    for (const byte of header) sum += byte;
    put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
    blocks.push(header, body, Buffer.alloc((512 - (body.length % 512)) % 512, 0));
  }
  blocks.push(Buffer.alloc(1024, 0));
  return Buffer.concat(blocks);
}

const gz = (text: string | Buffer) => gzipSync(text, { level: 9 });

const JAVA_HELLO = 'public class Hello {\n    public static void main(String[] args) {\n        System.out.println("Hello, world");\n    }\n}\n';
const PHP = (n: number, extra = "") => `<?php\n// page ${n}\n$title = "Page ${n}";\n\necho $title;\n${extra}\nfunction render${n}() {\n    return "<p>${n}</p>";\n}\n?>\n`;
const GENES_A = "Gene1 12 alpha\nGene2 7 beta\nGene4 3 delta\nGene5 9 epsilon\n";
const GENES_B = "Gene2 x11\nGene3 x22\nGene5 x55\n";

/** /testbed — the tree of `nl2bash_fs_1.json`. */
function testbed(): TreeNode[] {
  return [
    file("textfile7.txt", "Seven sisters sat by the sea.\nThe tide came in at seven.\n", 3 * DAY),
    file("Hello.java", JAVA_HELLO, 10 * DAY),
    file("HelloCopy.java", JAVA_HELLO, 10 * DAY),
    file("Greeter.java", 'class Greeter {\n    String greet() { return "hi"; }\n}\n', 1 * DAY),
    file("notes.txt", prose(1, 12), 9 * DAY),
    dir("dir1", DAY),
    dir("dir1/subdir1", DAY),
    file("dir1/textfile1.txt", prose(2, 20), 8 * DAY),
    file("dir1/subdir1/textfile4.txt", GENES_A, 2 * DAY),
    file("dir1/subdir1/script1.py", 'print("one")\n', 5 * DAY),
    file("dir1/subdir1/script2.py", 'import sys\nprint("two", sys.argv)\n', 5 * DAY),
    file("dir1/subdir1/main.c", '#include <stdio.h>\n\nint main(void) {\n    printf("Hello from C\\n");\n    return 0;\n}\n', 12 * DAY),
    file("dir1/index.php", PHP(1, 'echo "hello world";\n'), 4 * DAY),
    file("dir1/README.md", "# Project\n\nSee dir2.\n", 6 * DAY),
    file("dir1/foo01", "first foo\nsecond foo\n", 3 * DAY),
    file("dir1/special.bin", "special permissions\n", 3 * DAY, 0o553),
    dir("dir1/FooBar", 3 * DAY),
    file("dir1/FooBar/file.txt", "a file under FooBar\n", 3 * DAY),
    dir("dir2", DAY),
    dir("dir2/subdir1", DAY),
    dir("dir2/subdir2", DAY),
    file("dir2/readme.md", "readme in lower case\n", 6 * DAY),
    file("dir2/util.c", "int add(int a, int b) {\n    return a + b;\n}\n", 15 * DAY),
    file("dir2/job.history", "job 1 OK\njob 2 FAIL\njob 3 OK\n", 20 * DAY),
    file("dir2/fooab", "foo ab\n", 2 * DAY),
    file("dir2/subdir1/textfile2.txt", "apple\nbanana\ncherry\napple\n", 4 * DAY),
    file("dir2/subdir1/page.html", "<html><body>foo bar</body></html>\n", 4 * DAY),
    file("dir2/subdir1/test.php", PHP(2), 4 * DAY),
    file("dir2/subdir2/textfile5.txt", GENES_B, 2 * DAY),
    file("dir2/subdir2/app.js", "const x = 1;\nconsole.log(x);\n\nexport default x;\n", 2 * DAY),
    file("dir2/subdir2/log.gz", gz("line one\nline two\nline three\nline four\nline five\n"), 30 * DAY),
    file("dir2/subdir2/big.log", prose(3, 300, 10), 40 * DAY),
    dir("dir3", DAY),
    dir("dir3/subdir1", DAY),
    dir("dir3/subdir1/subsubdir1", DAY),
    dir("dir3/subdir1/subsubdir1/tmp", DAY),
    file("dir3/app.php", PHP(3, "// a greeting for the world\n"), 3 * DAY),
    file("dir3/index.html", "<html><body>welcome</body></html>\n", 3 * DAY),
    file("dir3/subdir1/subsubdir1/textfile3.txt", "banana\ncherry\ndate\n", 2 * DAY),
    file("dir3/subdir1/subsubdir1/FooBar", "not a folder\n", 2 * DAY),
    file("dir3/subdir1/subsubdir1/tmp/old1.tmp", "old\n", 5 * DAY),
    file("dir3/subdir1/subsubdir1/tmp/old2.tmp", "older\n", 9 * DAY),
    file("dir3/subdir1/subsubdir1/tmp/fresh.tmp", "fresh\n", 1 * HOUR),
  ];
}

/** /system — the tree of `nl2bash_fs_2.json`. */
function system(): TreeNode[] {
  const crlf = "first line\r\nsecond line\r\nthird line\r\n";
  return [
    file("text1.txt", "Text one.\nIt has two lines.\n", 3 * DAY),
    file("text2.txt", "ten bytes\n", 3 * DAY),
    file("report_text.md", "text report\n", 3 * DAY),
    file("a.out", Buffer.from("\x7fELF fake binary\n", "latin1"), 10 * DAY, 0o755),
    file("main.o", Buffer.from("object code\n"), 10 * DAY),
    file("core", Buffer.from("core dump\n"), 2 * DAY),
    file("large.bin", Buffer.alloc(2048, 0x61), 40 * DAY),
    dir("folder1", DAY),
    file("folder1/data.csv", "id,name,city,zip,phone,email,age\n1,ann,rome,00100,555-1,ann@x.org,31\n2,bob,oslo,0150,555-2,bob@x.org,42\n", 40 * DAY),
    file("folder1/keep.txt", "keep me\n", 10 * DAY),
    file("folder1/old.txt", "an old note\n", 10 * DAY),
    file("folder1/recent.txt", "a recent note\n", 1 * MIN),
    file("folder1/hello.txt", "Hello there\nhello again\nbye\n", 2 * DAY),
    file("folder1/special_report.doc", "special report\n", 5 * DAY),
    file("folder1/app.log", "started\nstopped\n", 5 * DAY),
    file("folder1/debug.log", "debug foo\n", 50 * DAY),
    file("folder1/new_script.sh", "#!/bin/sh\necho new\n", 5 * DAY, 0o755),
    file("folder1/run.sh", "#!/bin/sh\necho run\n", 5 * DAY, 0o755),
    file("folder1/text2", "two\n", 5 * DAY),
    file("folder1/text3", "three\n", 5 * DAY),
    file("folder1/text4", "four\n", 5 * DAY),
    file("folder1/text5", "five\n", 5 * DAY),
    file("folder1/special_notes.txt", "special notes\n", 5 * DAY),
    dir("folder1/src", DAY),
    file("folder1/src/Hello.c", 'int main(void) { return 0; } /* Hello */\n', 5 * DAY),
    dir("folder2", DAY),
    file("folder2/.hidden", "hidden foo\n", 5 * DAY),
    file("folder2/readme.txt", "foo bar baz\nfoobar is not foo\n", 5 * DAY),
    file("folder2/result.out", "output\n", 5 * DAY),
    file("folder2/keep.txt", "keep me too\n", 10 * DAY),
    dir("folder2/sub", DAY),
    file("folder2/sub/x.out", "x\n", 5 * DAY),
    file("folder2.tar.gz", gz(ustar([{ name: "folder2/notes.txt", content: "a special line\nan ordinary line\n" }])), 20 * DAY),
    dir("folder3", DAY),
    dir("folder3/temp", DAY),
    dir("folder3/temp/temp1", DAY),
    file("folder3/temp/temp1/text1.txt", crlf, 3 * DAY),
    dir("folder3/temp/temp2", DAY),
    dir("folder3/temp/temp3", DAY),
    dir("folder3/temp/temp3/deeper", DAY),
    file("folder3/temp/empty.txt", "", 3 * DAY),
    file("folder3/temp/zero.dat", "", 3 * DAY),
    file("folder3/temp/.DS_Store", "mac\n", 3 * DAY),
    file("folder3/temp/._notes", "mac\n", 3 * DAY),
    file("folder3/temp/temp", "a file called temp\n", 3 * DAY),
    dir("folder3/backup_dbg", DAY),
    file("folder3/backup_dbg/old.sql", "select 1;\n", 30 * DAY),
    file("folder3/backup_dbg/new.sql", "select 2;\n", 1 * DAY),
    dir("folder3/backup_dbg/backup", DAY),
  ];
}

/** /workspace — the tree of `nl2bash_fs_3.json`. */
function workspace(): TreeNode[] {
  const long = prose(7, 80, 9);
  return [
    file("files.txt", "/workspace/dir1/a.txt\n/workspace/dir1/long.txt\n/workspace/dir2/b.log\n", 5 * DAY),
    file("results.txt", "/workspace/dir1/a.txt\n/workspace/dir1/sum.c\n", 5 * DAY),
    file("archive.tar.gz", gz(ustar([{ name: "archive/readme.txt", content: "archived\n" }, { name: "archive/data.csv", content: "a,b\n1,2\n" }])), 20 * DAY),
    file(".hidden1", "hidden one\n", 5 * DAY),
    file(".config", "key=value\n", 5 * DAY),
    file("run.sh", "#!/bin/sh\necho run\n", 3 * DAY, 0o777),
    file("build.sh", "#!/bin/sh\necho build\n", 3 * DAY, 0o755),
    file("secret.txt", "top secret\n", 3 * DAY, 0o400),
    file("foo", "foo file\n", 10 * MIN),
    file("empty.log", "", 10 * MIN),
    file("Notes.TXT", "notes in caps\n", 2 * DAY),
    dir("emptydir", 4 * DAY),
    dir("dir1", DAY),
    file("dir1/long.txt", long, 40 * DAY),
    file("dir1/terminate.txt", long.split("\n").slice(0, 70).join("\n") + "\nthe end is near\n", 40 * DAY),
    file("dir1/a.txt", "first\n\nsecond line\n   \nlast words here\n\n", 3 * DAY),
    file("dir1/sum.c", `#include <stdio.h>\n/* sums */\n${Array.from({ length: 60 }, (_, i) => `int f${i}(int x) { return x + ${i}; }`).join("\n")}\nint main(void) { printf("%d\\n", f1(1)); return 0; }\n`, 10 * DAY),
    file("dir1/file.txt", "/usr/local/bin/tool\n/etc/hosts\n/workspace/dir1/long.txt\n", 3 * DAY),
    file("dir1/hello.txt", "Hello there\n", 2 * DAY),
    file("dir1/notes.txt", "nothing to see\nHELLO in capitals\n", 2 * DAY),
    dir("dir1/sub", DAY),
    file("dir1/sub/deep.md", "deep\n", 2 * DAY),
    dir("dir2", DAY),
    dir("dir2/mysql", DAY),
    file("dir2/mysql/my.cnf", "[mysqld]\nport=3306\n", 8 * DAY),
    file("dir2/a.txt", "first\n\nsecond line\n   \nlast words here\n\n", 3 * DAY),
    file("dir2/b.log", "log line\n", 1 * DAY),
    file("dir2/data.gz", gz("compressed data\n"), 6 * DAY),
    file("dir2/hello.sh", "#!/bin/sh\necho hello\n", 6 * DAY, 0o755),
  ];
}

const SPECS: Record<FileSystemName, () => FileSystemSpec> = {
  testbed: () => ({ name: "testbed", mountPoint: "/testbed", nodes: testbed() }),
  system: () => ({ name: "system", mountPoint: "/system", nodes: system() }),
  workspace: () => ({ name: "workspace", mountPoint: "/workspace", nodes: workspace() }),
};

export function fileSystem(name: FileSystemName): FileSystemSpec {
  const make = SPECS[name];
  if (!make) throw new Error(`bash: unknown file system "${name}"; expected testbed, system or workspace`);
  return make();
}

export const FILE_SYSTEMS: FileSystemName[] = ["testbed", "system", "workspace"];
