// discovery-front: the discovery that Kubernetes' standalone CRD server leaves to the aggregator
// of a whole kube-apiserver, so that kubectl (and any client-go client: Argo CD, Flux) can map
// kinds to resources on the CEL lane of gpuplane's tests (e2e/kube/control-plane.sh, CRD_SERVER=1).
//
// It serves /api (the core group, with no resources: this server has none) and /apis (the
// apiextensions group and each established CRD's group, read from the CRD server on every
// request) itself, and passes every other request to the CRD server unchanged, with the admin's
// client certificate. Clients must present a certificate of the test CA (as to the server).
// Standard library only; written for the tests, built by e2e/setup/kube-cel-build.sh.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

type groupVersion struct {
	GroupVersion string `json:"groupVersion"`
	Version      string `json:"version"`
}

type group struct {
	Name             string         `json:"name"`
	Versions         []groupVersion `json:"versions"`
	PreferredVersion groupVersion   `json:"preferredVersion"`
}

// The fields of a CRD this front reads.
type crdList struct {
	Items []struct {
		Spec struct {
			Group    string `json:"group"`
			Versions []struct {
				Name    string `json:"name"`
				Served  bool   `json:"served"`
				Storage bool   `json:"storage"`
			} `json:"versions"`
		} `json:"spec"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"items"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := flag.String("upstream", "", "URL of the CRD server")
	cert := flag.String("tls-cert-file", "", "serving certificate")
	key := flag.String("tls-private-key-file", "", "serving key")
	ca := flag.String("client-ca-file", "", "CA of client certificates and of the CRD server's")
	clientCert := flag.String("client-cert", "", "certificate to present to the CRD server")
	clientKey := flag.String("client-key", "", "key of -client-cert")
	flag.Parse()

	pem, err := os.ReadFile(*ca)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatal("no certificate in ", *ca)
	}
	own, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
	if err != nil {
		log.Fatal(err)
	}
	target, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{own}},
		ForceAttemptHTTP2: true,
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // watches stream through at once
	client := &http.Client{Transport: transport}

	mux := http.NewServeMux()
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": r.Host}}})
	})
	mux.HandleFunc("/api/v1", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []any{}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, r *http.Request) {
		groups, err := groups(client, *upstream)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		reply(w, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
	})
	mux.Handle("/", proxy)

	server := &http.Server{
		Addr:      *listen,
		Handler:   mux,
		TLSConfig: &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
	}
	log.Printf("discovery-front on %s for %s", *listen, *upstream)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}

// The apiextensions group and the group of every established CRD (one entry a group, each
// served version once), storage version preferred.
func groups(client *http.Client, upstream string) ([]group, error) {
	resp, err := client.Get(upstream + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list crdList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	ext := groupVersion{"apiextensions.k8s.io/v1", "v1"}
	out := []group{{"apiextensions.k8s.io", []groupVersion{ext}, ext}}
	index := map[string]int{}
	for _, crd := range list.Items {
		established := false
		for _, c := range crd.Status.Conditions {
			established = established || (c.Type == "Established" && c.Status == "True")
		}
		if !established {
			continue
		}
		g := crd.Spec.Group
		i, ok := index[g]
		if !ok {
			i = len(out)
			index[g] = i
			out = append(out, group{Name: g})
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := groupVersion{g + "/" + v.Name, v.Name}
			if !contains(out[i].Versions, gv) {
				out[i].Versions = append(out[i].Versions, gv)
			}
			if v.Storage || out[i].PreferredVersion.Version == "" {
				out[i].PreferredVersion = gv
			}
		}
	}
	return out, nil
}

func contains(list []groupVersion, gv groupVersion) bool {
	for _, x := range list {
		if x == gv {
			return true
		}
	}
	return false
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
