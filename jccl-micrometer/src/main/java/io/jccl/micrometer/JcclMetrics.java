package io.jccl.micrometer;

import io.jccl.collectives.Collective;
import io.jccl.collectives.Communicator;
import io.jccl.verbs.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.BaseUnits;
import io.micrometer.core.instrument.binder.MeterBinder;

import java.util.Locale;
import java.util.Map;

/**
 * Binds one communicator's counters to a Micrometer {@link MeterRegistry}: what JCCL counts anyway, read when the
 * registry is scraped (nothing is added to an operation's path).
 *
 * <table>
 *   <caption>Meters (tags {@code communicator} and {@code rank} on every one)</caption>
 *   <tr><th>meter</th><th>type</th><th>more tags</th><th>source</th></tr>
 *   <tr><td>{@code jccl.collective.operations}</td><td>function counter</td><td>{@code collective}</td>
 *       <td>operations that completed</td></tr>
 *   <tr><td>{@code jccl.collective.bytes}</td><td>function counter (bytes)</td><td>{@code collective}</td>
 *       <td>their size as nccl-tests counts it</td></tr>
 *   <tr><td>{@code jccl.collective.errors}</td><td>function counter</td><td>{@code collective}</td>
 *       <td>operations that failed</td></tr>
 *   <tr><td>{@code jccl.device.<counter>}, e.g. {@code jccl.device.port.xmit.data}</td><td>function counter</td>
 *       <td>{@code device}</td><td>the device's {@link Counter}s ({@code jccl devinfo -v}), direct path
 *       included</td></tr>
 *   <tr><td>{@code jccl.communicator.size}</td><td>gauge</td><td></td><td>ranks in the communicator</td></tr>
 * </table>
 *
 * <p>Collectives that never ran are registered too (at 0), so dashboards see every series from the start. Meters
 * hold the communicator weakly (Micrometer's function meters do); after it closes, device meters read 0 — remove
 * them with {@link MeterRegistry#remove} if the registry outlives communicators.
 */
public final class JcclMetrics implements MeterBinder {
    private final Communicator communicator;
    private final Iterable<Tag> extraTags;

    /** A binder for {@code communicator}, with {@code tags} added to every meter. */
    public JcclMetrics(Communicator communicator, Iterable<Tag> tags) {
        this.communicator = communicator;
        this.extraTags = tags;
    }

    /** A binder for {@code communicator}. */
    public JcclMetrics(Communicator communicator) {
        this(communicator, Tags.empty());
    }

    /** Binds {@code communicator}'s counters to {@code registry} and returns the binder. */
    public static JcclMetrics bind(MeterRegistry registry, Communicator communicator) {
        JcclMetrics metrics = new JcclMetrics(communicator);
        metrics.bindTo(registry);
        return metrics;
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        Tags base = Tags.of(extraTags).and("communicator", communicator.options().name())
            .and("rank", Integer.toString(communicator.rank()));
        for (Collective c : Collective.values()) {
            Tags tags = base.and("collective", c.displayName());
            FunctionCounter.builder("jccl.collective.operations", communicator, comm -> comm.statistics().operations(c))
                .description("JCCL operations that completed on this rank").baseUnit("operations").tags(tags)
                .register(registry);
            FunctionCounter.builder("jccl.collective.bytes", communicator, comm -> comm.statistics().bytes(c))
                .description("Bytes of the JCCL operations that completed on this rank (nccl-tests size)")
                .baseUnit(BaseUnits.BYTES).tags(tags).register(registry);
            FunctionCounter.builder("jccl.collective.errors", communicator, comm -> comm.statistics().errors(c))
                .description("JCCL operations that failed on this rank").baseUnit("operations").tags(tags)
                .register(registry);
        }
        for (String device : communicator.deviceCounters().keySet()) {
            Tags tags = base.and("device", device);
            for (Counter counter : Counter.values()) {
                FunctionCounter.builder(meterName(counter), communicator, comm -> read(comm, device, counter))
                    .description("JCCL device counter " + counter.linuxName() + " (jccl devinfo -v)")
                    .baseUnit(isBytes(counter) ? BaseUnits.BYTES : null).tags(tags).register(registry);
            }
        }
        Gauge.builder("jccl.communicator.size", communicator, Communicator::size)
            .description("Ranks in the JCCL communicator").tags(base).register(registry);
    }

    /** The Linux counter name with dots after {@code jccl.device.}: {@code jccl.device.port.xmit.data}. */
    static String meterName(Counter counter) {
        return "jccl.device." + counter.linuxName().toLowerCase(Locale.ROOT).replace('_', '.');
    }

    private static boolean isBytes(Counter counter) {
        return counter == Counter.PORT_XMIT_DATA || counter == Counter.PORT_RCV_DATA;
    }

    private static double read(Communicator comm, String device, Counter counter) {
        Map<Counter, Long> counters = comm.deviceCounters().get(device);
        Long value = counters == null ? null : counters.get(counter);
        return value == null ? 0 : value;
    }
}
