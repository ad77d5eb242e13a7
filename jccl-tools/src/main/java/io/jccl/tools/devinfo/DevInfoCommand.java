package io.jccl.tools.devinfo;

import io.jccl.tools.Json;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Device;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.spi.CounterFile;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** {@code jccl devinfo}: every device of every provider, as {@code ibv_devinfo} prints an HCA. */
@Command(name = "devinfo", mixinStandardHelpOptions = true,
    description = {"Print the attributes and port state of every JCCL device (like ibv_devinfo).",
        "-v adds the extended attributes and the counters of the context this command opens; with --pid PID the "
            + "counters are those of the running process PID, one block per context it has open (read from its "
            + "counter file, as AeronStat reads a driver's counters)."})
public final class DevInfoCommand implements Callable<Integer> {
    @Option(names = {"-d", "--ib-dev"}, paramLabel = "DEV", description = "only this device (or provider)")
    String device;

    @Option(names = {"-i", "--ib-port"}, paramLabel = "PORT", description = "only this port (default: all)")
    int port;

    @Option(names = {"-v", "--verbose"}, description = "all attributes and the context's counters")
    boolean verbose;

    @Option(names = {"-l", "--list"}, description = "print only the device names")
    boolean list;

    @Option(names = "--json", description = "print JSON instead of text")
    boolean json;

    @Option(names = {"-p", "--pid"}, paramLabel = "PID", description = "the counters of running process PID "
        + "(implies -v); 0 = every process that publishes JCCL counters")
    Long pid;

    PrintStream out = System.out;

    @Override
    public Integer call() {
        List<Device> devices = device == null ? Verbs.devices() : List.of(Verbs.device(device));
        if (devices.isEmpty()) {
            System.err.println("No JCCL devices found (is a provider jar on the class path?)");
            return 1;
        }
        if (list) {
            out.printf("%d HCA%s found:%n", devices.size(), devices.size() != 1 ? "s" : "");
            devices.forEach(d -> out.printf("\t%s%n", d.name()));
            out.println();
            return 0;
        }
        if (pid != null) {
            return printProcess(pid, devices);
        }
        List<Object> jsonDevices = new ArrayList<>();
        int status = 0;
        for (Device d : devices) {
            try (Context context = d.openToQuery()) {
                DeviceAttributes attributes = context.query();
                Map<Counter, Long> counters = verbose ? sorted(context.counters()) : null;
                if (json) {
                    jsonDevices.add(DevInfoPrinter.devinfoJson(attributes, verbose, port, counters));
                } else {
                    out.print(DevInfoPrinter.devinfo(attributes, verbose, port, counters));
                }
            } catch (RuntimeException e) {
                System.err.println("Failed to open or query device " + d.name() + ": " + e.getMessage());
                status = 1;
            }
        }
        if (json) {
            Map<String, Object> root = new LinkedHashMap<>();
            root.put("devices", jsonDevices);
            out.print(Json.write(root));
        }
        return status;
    }

    /** --pid: every context that process {@code processId} (0: every process) publishes, with its counters. */
    private int printProcess(long processId, List<Device> devices) {
        List<CounterFile.Published> published;
        try {
            published = CounterFile.read(processId == 0 ? -1 : processId);
        } catch (java.io.IOException e) {
            System.err.println("Cannot read " + CounterFile.directory() + ": " + e.getMessage());
            return 1;
        }
        List<String> wanted = devices.stream().map(Device::name).toList();
        published = published.stream().filter(p -> device == null || wanted.contains(p.device())).toList();
        if (published.isEmpty()) {
            System.err.println("No JCCL counters published by " + (processId == 0 ? "any process" : "process "
                + processId) + (device != null ? " for device " + device : "") + " in " + CounterFile.directory()
                + " (is it running with a JCCL context open, as the same user, without JCCL_COUNTERS=0?)");
            return 1;
        }
        List<Object> jsonDevices = new ArrayList<>();
        for (CounterFile.Published p : published) {
            Map<Counter, Long> counters = new EnumMap<>(Counter.class);
            for (Counter c : Counter.values()) {
                counters.put(c, p.counters().getOrDefault(c.linuxName(), 0L));
            }
            DeviceAttributes attributes = null;
            try (Context context = Verbs.device(p.device()).openToQuery()) {
                attributes = context.query();
            } catch (RuntimeException e) {
                // a device this process cannot open (provider missing here): the counters alone still help
            }
            if (json) {
                Map<String, Object> entry = attributes != null
                    ? new LinkedHashMap<>(DevInfoPrinter.devinfoJson(attributes, true, port, counters))
                    : new LinkedHashMap<>(Map.of("hca_id", p.device()));
                entry.put("pid", p.pid());
                entry.put("counter_file", p.path().toString());
                if (attributes == null) {
                    Map<String, Object> values = new LinkedHashMap<>();
                    counters.forEach((c, v) -> values.put(c.linuxName(), v));
                    entry.put("counters", values);
                }
                jsonDevices.add(entry);
            } else {
                out.printf("process:\t%d\t(%s)%n", p.pid(), p.path());
                if (attributes != null) {
                    out.print(DevInfoPrinter.devinfo(attributes, true, port, counters,
                        "process " + p.pid() + "'s context"));
                } else {
                    out.printf("hca_id:\t%s%n", p.device());
                    counters.forEach((c, v) -> out.printf("\t\t\t%s:\t%d%n", c.linuxName(), v));
                    out.println();
                }
            }
        }
        if (json) {
            Map<String, Object> root = new LinkedHashMap<>();
            root.put("devices", jsonDevices);
            out.print(Json.write(root));
        }
        return 0;
    }

    private static Map<Counter, Long> sorted(Map<Counter, Long> counters) {
        Map<Counter, Long> all = new EnumMap<>(Counter.class);
        for (Counter c : Counter.values()) {
            all.put(c, counters.getOrDefault(c, 0L));
        }
        return all;
    }
}
