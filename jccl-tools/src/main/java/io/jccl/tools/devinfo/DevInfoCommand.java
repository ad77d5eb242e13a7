package io.jccl.tools.devinfo;

import io.jccl.tools.Json;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Device;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.Verbs;
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
        "-v adds the extended attributes and the counters of the context this command opens "
            + "(counters of other running processes: not available yet)."})
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
        List<Object> jsonDevices = new ArrayList<>();
        int status = 0;
        for (Device d : devices) {
            try (Context context = d.open()) {
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

    private static Map<Counter, Long> sorted(Map<Counter, Long> counters) {
        Map<Counter, Long> all = new EnumMap<>(Counter.class);
        for (Counter c : Counter.values()) {
            all.put(c, counters.getOrDefault(c, 0L));
        }
        return all;
    }
}
