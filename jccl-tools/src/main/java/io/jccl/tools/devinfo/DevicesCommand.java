package io.jccl.tools.devinfo;

import io.jccl.tools.Json;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** {@code jccl devices}: the device list with node GUIDs, as {@code ibv_devices} prints it. */
@Command(name = "devices", mixinStandardHelpOptions = true,
    description = "List the JCCL devices of every provider with their node GUID (like ibv_devices).")
public final class DevicesCommand implements Callable<Integer> {
    @Option(names = "--json", description = "print JSON instead of text")
    boolean json;

    PrintStream out = System.out;

    @Override
    public Integer call() {
        List<DevInfoPrinter.DeviceRow> rows = new ArrayList<>();
        for (Device d : Verbs.devices()) {
            rows.add(new DevInfoPrinter.DeviceRow(d.name(), d.providerName(), d.guid()));
        }
        if (json) {
            List<Object> list = new ArrayList<>();
            for (DevInfoPrinter.DeviceRow row : rows) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("device", row.name());
                m.put("provider", row.provider());
                m.put("node_guid", String.format("%016x", row.guid()));
                list.add(m);
            }
            Map<String, Object> root = new LinkedHashMap<>();
            root.put("devices", list);
            out.print(Json.write(root));
        } else {
            out.print(DevInfoPrinter.devices(rows));
        }
        return 0;
    }
}
