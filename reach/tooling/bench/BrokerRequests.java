import com.sun.tools.attach.VirtualMachine;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Attaches to a broker JVM by pid, then for every line read from stdin prints the broker's request counts by
 * type since it started, as one JSON line: {"Fetch": 123, ...}. Used by reach/tooling/bench/costs.py.
 */
public class BrokerRequests {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String url;
        try {
            url = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector jmx = JMXConnectorFactory.connect(new JMXServiceURL(url));
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
            MBeanServerConnection server = jmx.getMBeanServerConnection();
            System.out.println("{}");  // attached
            System.out.flush();
            while (in.readLine() != null) {
                System.out.println(counts(server));
                System.out.flush();
            }
        }
    }

    private static String counts(MBeanServerConnection server) throws Exception {
        Map<String, Long> counts = new TreeMap<>();
        for (ObjectName name : server.queryNames(
                new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null)) {
            long count = ((Number) server.getAttribute(name, "Count")).longValue();
            counts.merge(name.getKeyProperty("request"), count, Long::sum);
        }
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, Long> e : counts.entrySet()) {
            if (out.length() > 1) out.append(", ");
            out.append('"').append(e.getKey()).append("\": ").append(e.getValue());
        }
        return out.append('}').toString();
    }
}
