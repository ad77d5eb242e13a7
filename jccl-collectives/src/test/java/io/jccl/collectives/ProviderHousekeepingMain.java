package io.jccl.collectives;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Context;
import io.jccl.verbs.Verbs;

/**
 * A child process for {@link TcpOnlyJobReapTest}: {@code hold} opens {@code shm0}, registers memory (files in
 * /dev/shm), prints {@code HOLD} and waits to be killed; {@code tcp} opens only {@code tcp0}, as a job with
 * JCCL_TRANSPORT=tcp0 does, waits {@code args[1]} ms and prints {@code DONE}.
 */
public final class ProviderHousekeepingMain {
    private ProviderHousekeepingMain() {
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "hold" -> {
                Context shm = Verbs.device("shm0").open();
                shm.allocateProtectionDomain().allocateMemory(4096, AccessFlag.LOCAL_WRITE);
                System.out.println("HOLD");
                System.out.flush();
                Thread.sleep(600_000);
            }
            case "tcp" -> {
                try (Context tcp = Verbs.device("tcp0").open()) {
                    Thread.sleep(Long.parseLong(args[1]));
                }
                System.out.println("DONE");
            }
            default -> throw new IllegalArgumentException(args[0]);
        }
    }
}
