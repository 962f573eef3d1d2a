// A running broker's request counts and request-handler idle time, read over JMX as an
// operator's JConsole would. It attaches to the broker's JVM by process id (the JDK's Attach
// API starts the local management agent), so the broker needs no JMX port of its own.
// Run: java BrokerRequestMetrics.java PID INTERVAL_MS COUNT
// Prints COUNT snapshots, INTERVAL_MS apart:
//   <millis since start> requests <request type> <count since the broker started>
//     (kafka.network:type=RequestMetrics,name=RequestsPerSec, summed over versions)
//   <millis since start> idle <count>
//     (kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent: the
//     handler threads' idle nanoseconds, each divided by the number of threads)
// then "end" after each snapshot.
import com.sun.tools.attach.VirtualMachine;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequestMetrics {
    public static void main(String[] args) throws Exception {
        long interval = Long.parseLong(args[1]);
        int count = Integer.parseInt(args[2]);
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address = vm.startLocalManagementAgent();
        vm.detach();
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            ObjectName requests = new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*");
            ObjectName idle = new ObjectName("kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent");
            long start = System.currentTimeMillis();
            for (int i = 0; i < count; i++) {
                if (i > 0) Thread.sleep(interval);
                long at = System.currentTimeMillis() - start;
                Map<String, Long> counts = new TreeMap<>();
                for (ObjectName name : server.queryNames(requests, null)) {
                    Object value = server.getAttribute(name, "Count");
                    counts.merge(name.getKeyProperty("request"), ((Number) value).longValue(), Long::sum);
                }
                StringBuilder out = new StringBuilder();
                for (Map.Entry<String, Long> entry : counts.entrySet()) {
                    out.append(at).append(" requests ").append(entry.getKey()).append(' ')
                        .append(entry.getValue()).append('\n');
                }
                out.append(at).append(" idle ").append(server.getAttribute(idle, "Count")).append('\n');
                out.append("end\n");
                System.out.print(out);
                System.out.flush();
            }
        }
    }
}
