"""The local ActiveMQ 5.17 broker (Debian's `activemq` package) with a STOMP connector.

Debian's init scripts assume a systemd-era layout and open no STOMP port, so we launch
`activemq.jar` ourselves with a generated `activemq.xml` (STOMP on loopback, non-persistent: every
message SMILE sends is idempotent and re-sent after a restart) and a log4j 1.2 configuration.

Must not: carry SMILE messages; that is the agent transport's job.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.cloud.procs import port_open, read_pidfile, stop_pid
from smile.errors import CloudError

if TYPE_CHECKING:
    from pathlib import Path

_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core
    http://activemq.apache.org/schema/core/activemq-core.xsd">
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="smile"
          persistent="false" dataDirectory="${{activemq.data}}">
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage limit="128 mb"/></memoryUsage>
    </systemUsage></systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}?transport.closeAsync=false"/>
    </transportConnectors>
  </broker>
</beans>
"""

_LOG4J = """log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d %-5p %c - %m%n
"""


def stomp_handshake(host: str, port: int, timeout: float = 2.0) -> bool:
    """True if a STOMP 1.2 CONNECT on host:port is answered with CONNECTED."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
            reply = s.recv(64)
            s.sendall(b"DISCONNECT\n\n\x00")
            return reply.startswith(b"CONNECTED")
    except OSError:
        return False


@dataclass(frozen=True)
class LocalBroker:
    root: Path
    port: int
    activemq_home: Path

    @property
    def stomp_url(self) -> str:
        return f"stomp://127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.root / "broker.pid"

    @property
    def logfile(self) -> Path:
        return self.root / "broker.log"

    def pid(self) -> int | None:
        return read_pidfile(self.pidfile)

    def start(self, timeout: float = 30.0) -> None:
        if self.pid() is not None:
            return
        jar = self.activemq_home / "bin" / "activemq.jar"
        if not jar.exists():
            raise CloudError(f"{jar} is missing: install Debian's `activemq` package")
        if port_open("127.0.0.1", self.port):
            raise CloudError(f"port {self.port} is taken by another process; set SMILE_STOMP_PORT")
        conf, data = self.root / "conf", self.root / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        (conf / "activemq.xml").write_text(_XML.format(port=self.port))
        (conf / "log4j.properties").write_text(_LOG4J)
        argv = [
            "java", "-Xms64m", "-Xmx256m", "-Djava.awt.headless=true",
            f"-Dactivemq.home={self.activemq_home}", f"-Dactivemq.base={self.root}",
            f"-Dactivemq.conf={conf}", f"-Dactivemq.data={data}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            "-jar", str(jar), "start", f"xbean:file:{conf / 'activemq.xml'}",
        ]
        with self.logfile.open("ab") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.root,
            )
        self.pidfile.write_text(f"{proc.pid}\n")
        if not self._wait_ready(proc, timeout):
            stop_pid(proc.pid, timeout=2)
            tail = self.logfile.read_text(errors="replace")[-1500:]
            raise CloudError(f"ActiveMQ did not open STOMP port {self.port}: {tail}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if stomp_handshake("127.0.0.1", self.port, timeout=0.5):
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            stop_pid(pid, timeout=10)
        self.pidfile.unlink(missing_ok=True)

    def healthy(self) -> bool:
        return self.pid() is not None and stomp_handshake("127.0.0.1", self.port)
