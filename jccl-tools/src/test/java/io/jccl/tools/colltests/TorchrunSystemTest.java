package io.jccl.tools.colltests;

import io.jccl.tools.JcclRuntime;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Two JCCL ranks started by torchrun ({@code python3 -m torch.distributed.run --no_python java ...}, Debian package
 * python3-torch): with the static rendezvous the elastic agent serves its TCPStore at MASTER_PORT
 * ({@code TORCHELASTIC_USE_AGENT_STORE=True}) and the ranks use it (issue 16, bug #1: rank 0 died with "cannot bind
 * MASTER_PORT"); with {@code --standalone} the agent's store is elsewhere and rank 0 serves JCCL's own at MASTER_PORT.
 * Skipped with a message when no Python imports torch ({@code scripts/install-deps.sh} installs it).
 */
class TorchrunSystemTest {
    /** A Python that runs torchrun: JCCL_TEST_PYTHON, python3 or /usr/bin/python3 (where Debian puts torch). */
    private static String python() throws InterruptedException {
        List<String> candidates = new ArrayList<>();
        String configured = System.getenv("JCCL_TEST_PYTHON");
        if (configured != null && !configured.isBlank()) {
            candidates.add(configured);
        }
        candidates.addAll(List.of("python3", "/usr/bin/python3"));
        for (String c : candidates) {
            try {
                Process p = new ProcessBuilder(c, "-c", "import torch.distributed.run").redirectErrorStream(true)
                    .start();
                p.getInputStream().readAllBytes();
                if (p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0) {
                    return c;
                }
            } catch (IOException e) {
                // not there
            }
        }
        return null;
    }

    private static String torchrun(String python, List<String> rendezvous) throws Exception {
        Path logs = Files.createTempDirectory("jccl-torchrun");
        // --redirects 1 --tee 1: torch 1.13 on Python 3.11 cannot parse the default "0" (an IntFlag change).
        List<String> command = new ArrayList<>(List.of(python, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc_per_node", "2", "--redirects", "1", "--tee", "1", "--log_dir", logs.toString()));
        command.addAll(rendezvous);
        command.add("--no_python");
        command.addAll(JcclRuntime.javaCommand(List.of(), "io.jccl.tools.Main", List.of("tests", "all_reduce_perf",
            "-b", "8", "-e", "64K", "-f", "64", "-n", "3", "-w", "1", "--jit_warmup", "0")));
        String text = LauncherRun.run(new ProcessBuilder(command), 180, "torchrun");
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        assertTrue(text.contains("Rank  0 Group") && text.contains("Rank  1 Group"), text);
        assertFalse(text.contains("cannot bind"), text);
        return text;
    }

    @Test
    void shouldRunCollectivesThroughTorchrunsAgentStore() throws Exception {
        String python = python();
        assumeTrue(python != null, "no Python with torch.distributed.run (apt-get install python3-torch, or "
            + "scripts/install-deps.sh)");
        String text = torchrun(python, List.of("--master_addr", "127.0.0.1", "--master_port",
            Integer.toString(JcclRuntime.freePort())));
        assertTrue(text.contains("using torch TCPStore"), "the ranks used the agent's store: " + text);
    }

    @Test
    void shouldRunCollectivesUnderStandaloneTorchrun() throws Exception {
        String python = python();
        assumeTrue(python != null, "no Python with torch.distributed.run (apt-get install python3-torch, or "
            + "scripts/install-deps.sh)");
        String text = torchrun(python, List.of("--standalone"));
        assertFalse(text.contains("using torch TCPStore"), "rank 0 served JCCL's own store: " + text);
    }
}
