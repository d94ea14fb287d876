// Preload (node --import) for the server suite: resolves test host names to
// 127.0.0.1 inside this process only, so no /etc/hosts or resolver change is
// needed. The SDK's fetch (undici) connects through net/tls, which look names
// up with dns.lookup, so patching dns.lookup and dns.promises.lookup covers it.
//
// SDK_TEST_RESOLVE lists the domains to pin, comma-separated, e.g.
// "sandbox.test,localhost": the domain itself and every name under it resolve
// to 127.0.0.1 (IPv4). Other names go to the real resolver.

import dns from 'node:dns'

const domains = (process.env.SDK_TEST_RESOLVE ?? '')
  .split(',')
  .map((d) => d.trim().toLowerCase().replace(/\.$/, ''))
  .filter(Boolean)

function pinned(hostname) {
  if (typeof hostname !== 'string') return false
  const h = hostname.toLowerCase().replace(/\.$/, '')
  return domains.some((d) => h === d || h.endsWith('.' + d))
}

const LOOPBACK = { address: '127.0.0.1', family: 4 }

if (domains.length > 0) {
  const realLookup = dns.lookup
  dns.lookup = function lookup(hostname, options, callback) {
    if (typeof options === 'function') {
      callback = options
      options = {}
    }
    if (!pinned(hostname)) return realLookup.call(dns, hostname, options, callback)
    const opts = typeof options === 'number' ? { family: options } : (options ?? {})
    process.nextTick(() => {
      if (opts.all) callback(null, [LOOPBACK])
      else callback(null, LOOPBACK.address, LOOPBACK.family)
    })
    return {}
  }

  const realPromisesLookup = dns.promises.lookup
  dns.promises.lookup = async function lookup(hostname, options) {
    if (!pinned(hostname)) return realPromisesLookup.call(dns.promises, hostname, options)
    return options?.all ? [LOOPBACK] : { ...LOOPBACK }
  }
}
