"""A one-node Slurm cluster on this machine, for the tests (and by hand: python tests/slurm_cluster.py up DIR).

Debian's packages (slurmctld, slurmd, slurm-client, munge; slurmdbd and mariadb-server for accounting)
run as root without systemd: :func:`start` writes a ``slurm.conf`` for this host into a folder of its
own (the daemons and the client commands find it through ``SLURM_CONF``, so /etc/slurm is left
alone), starts munged (unless one answers already), a private MariaDB server and slurmdbd (without
accounting ``sacct`` knows no job, and submitit could never learn that a cancelled job ended),
slurmctld and slurmd, each on a free port, and waits until the node is idle. :meth:`SlurmCluster.stop`
cancels every job, waits until the queue is empty, then stops slurmd, slurmctld, slurmdbd, MariaDB
and munged in that order (munged last: a step that is still being killed needs it).

No cgroups here (a container): process tracking by /proc (proctrack/linuxproc), no task plugin.
``KillWait=5``: a cancelled job's processes get SIGTERM, then SIGKILL 5 s later (default 30 s).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PROGRAMS = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "slurmdbd", "sbatch", "srun", "squeue", "sinfo",
            "scancel", "sacct", "mariadbd", "mariadb-install-db")
PARTITION = "debug"
INSTALL = "apt-get install slurmctld slurmd slurm-client munge slurmdbd mariadb-server"


def why_not() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if not sys.platform.startswith("linux"):
        return "a Slurm cluster needs Linux"
    missing = [name for name in PROGRAMS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; {INSTALL})"
    if os.geteuid() != 0:
        return "starting Slurm's daemons needs root"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def wait_for(what: str, ready, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} within {timeout:.0f} s{': ' + tail if tail else ''}")
        time.sleep(0.2)


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts: PID 1 here may never reap what it adopted)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def munge_answers() -> bool:
    token = subprocess.run([program("munge"), "-n"], capture_output=True, timeout=10, check=False)
    return token.returncode == 0 and subprocess.run([program("unmunge")], input=token.stdout, capture_output=True,
                                                    timeout=10, check=False).returncode == 0


def memory_mb() -> int:
    """A little below this machine's available memory: what the node offers to jobs."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return max(512, int(line.split()[1]) // 1024 * 9 // 10)
    return 1024


@dataclass
class SlurmCluster:
    """A running one-node cluster: its folder, its ``SLURM_CONF`` and the daemons it started (name, pid)."""

    folder: Path
    partition: str = PARTITION
    daemons: list[tuple[str, int]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's client commands (and submitit) to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def node_state(self) -> str:
        try:
            return self.command("sinfo", "-h", "-o", "%T").strip()
        except RuntimeError:
            return ""

    def queue(self) -> list[str]:
        return self.command("squeue", "-h", "-o", "%i").split()

    def daemon(self, name: str, args: list[str], pid_file: Path | None = None) -> None:
        """Start a daemon that forks (its pid from ``pid_file``) or one kept in the background here."""
        with open(self.folder / f"{name}.out", "ab") as log:
            proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        if pid_file is None:
            self.daemons.append((name, proc.pid))
            return
        proc.wait(timeout=60)
        wait_for(f"{name} did not write {pid_file}", lambda: pid_file.exists() and pid_file.read_text().strip(), 30,
                 self.folder / f"{name}.log")
        self.daemons.append((name, int(pid_file.read_text().split()[0])))

    def stop(self) -> None:
        """Cancel every job, wait for the queue to empty, then stop the daemons, newest first."""
        if any(name == "slurmctld" for name, _ in self.daemons):
            try:
                self.command("scancel", "--user", pwd.getpwuid(os.geteuid()).pw_name)
                wait_for("jobs were still queued", lambda: not self.queue(), 60)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"slurm_cluster: {exc}", file=sys.stderr)
        for name, pid in reversed(self.daemons):
            try:
                os.kill(pid, signal.SIGTERM)
                wait_for(f"{name} ({pid}) did not stop", lambda pid=pid: gone(pid), 30)
            except ProcessLookupError:
                pass
            except RuntimeError:
                os.kill(pid, signal.SIGKILL)
        self.daemons.clear()


def start_munge(cluster: SlurmCluster) -> None:
    if munge_answers():
        return
    subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"], check=True)
    if not Path("/etc/munge/munge.key").exists():
        subprocess.run(["runuser", "-u", "munge", "--", "mungekey", "--create"], check=True)
    subprocess.run(["runuser", "-u", "munge", "--", program("munged")], check=True, timeout=30)
    wait_for("munged did not answer", munge_answers, 30)
    pid = Path("/run/munge/munged.pid")
    if pid.exists():
        cluster.daemons.append(("munged", int(pid.read_text().split()[0])))


def start_mariadb(cluster: SlurmCluster, port: int) -> None:
    """A private MariaDB server in the cluster's folder, on 127.0.0.1:``port``, that lets anyone in (it
    listens on the loopback only and holds nothing but this cluster's accounting)."""
    data = cluster.folder / "mariadb"
    subprocess.run([program("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                    "--skip-test-db", "--auth-root-authentication-method=normal"],
                   check=True, capture_output=True, timeout=120)
    cluster.daemon("mariadbd", [program("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root",
                                f"--port={port}", "--bind-address=127.0.0.1", f"--socket={cluster.folder}/mariadb.sock",
                                "--skip-grant-tables", f"--pid-file={cluster.folder}/mariadb.pid",
                                f"--log-error={cluster.folder}/mariadbd.log"])
    wait_for("MariaDB did not listen", lambda: port_open(port), 60, cluster.folder / "mariadbd.log")


def write_conf(cluster: SlurmCluster, ports: dict[str, int]) -> None:
    folder, host = cluster.folder, socket.gethostname().split(".")[0]
    (folder / "state").mkdir(exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    dbd = folder / "slurmdbd.conf"
    dbd.write_text("\n".join([
        "AuthType=auth/munge", "DbdHost=localhost", f"DbdPort={ports['dbd']}", "SlurmUser=root",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={ports['db']}",
        "StorageUser=root", "StorageLoc=slurm_acct_db", f"PidFile={folder}/slurmdbd.pid",
        f"LogFile={folder}/slurmdbd.log", ""]))
    dbd.chmod(0o600)  # slurmdbd refuses a config that others can read
    cluster.conf.write_text("\n".join([
        "ClusterName=bayesx", f"SlurmctldHost={host}", f"SlurmctldPort={ports['ctld']}", f"SlurmdPort={ports['d']}",
        "SlurmUser=root", "AuthType=auth/munge", "MpiDefault=none", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
        "KillWait=5", "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
        f"AccountingStoragePort={ports['dbd']}", "JobAcctGatherType=jobacct_gather/linux",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        f"NodeName={host} CPUs={os.cpu_count() or 1} RealMemory={memory_mb()} State=UNKNOWN",
        f"PartitionName={cluster.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))


def start(folder: Path) -> SlurmCluster:
    """Start the cluster in ``folder`` (created); stops what it started if a step fails."""
    folder.mkdir(parents=True, exist_ok=True)
    cluster = SlurmCluster(folder)
    ports = {name: free_port() for name in ("ctld", "d", "dbd", "db")}
    try:
        write_conf(cluster, ports)
        start_munge(cluster)
        start_mariadb(cluster, ports["db"])
        cluster.daemon("slurmdbd", [program("slurmdbd")], folder / "slurmdbd.pid")
        wait_for("slurmdbd did not listen", lambda: port_open(ports["dbd"]), 60, folder / "slurmdbd.log")
        cluster.daemon("slurmctld", [program("slurmctld"), "-c", "-i"], folder / "slurmctld.pid")
        cluster.daemon("slurmd", [program("slurmd")], folder / "slurmd.pid")
        wait_for("the node did not become idle", lambda: cluster.node_state() == "idle", 60, folder / "slurmctld.log")
    except BaseException:
        cluster.stop()
        raise
    return cluster


if __name__ == "__main__":  # python tests/slurm_cluster.py up DIR: start, print SLURM_CONF, stop on Ctrl-C
    if len(sys.argv) != 3 or sys.argv[1] != "up":
        raise SystemExit("usage: python tests/slurm_cluster.py up DIR  (stops the cluster on Ctrl-C)")
    if why_not():
        raise SystemExit(why_not())
    running = start(Path(sys.argv[2]).resolve())
    print(f"export SLURM_CONF={running.conf}  # partition {running.partition}; Ctrl-C stops the cluster", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
